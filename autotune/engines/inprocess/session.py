"""Run the in-process engines in a worker process, with a time limit and contained failures."""

from __future__ import annotations

import json
import queue
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.engines.inprocess.worker import WorkerRequest
from autotune.engines.process import ManagedProcess
from autotune.errors import TrialFailure

PhaseCallback = Callable[[str], None]


def run_worker(
    request: WorkerRequest,
    *,
    timeout_s: float,
    on_phase: PhaseCallback | None = None,
    log_dir: Path | None = None,
) -> tuple[dict[str, Any], str]:
    """Measure one configuration in a fresh process; returns (result, log tail).

    Raises TrialFailure for a crash, an out-of-memory error or a time-out; the process group is
    stopped in every case, Ctrl-C included.
    """
    workdir = Path(tempfile.mkdtemp(prefix="autotune-trial-", dir=log_dir))
    request_path = workdir / "request.json"
    request_path.write_text(request.model_dump_json(), encoding="utf-8")
    worker = ManagedProcess(
        [sys.executable, "-m", "autotune.engines.inprocess.worker", str(request_path)],
        log_path=workdir / "worker.log",
        capture_stdout=True,
    )
    try:
        with worker:
            return _follow(worker, timeout_s, on_phase)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _follow(
    worker: ManagedProcess, timeout_s: float, on_phase: PhaseCallback | None
) -> tuple[dict[str, Any], str]:
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_read_events, args=(worker, events), daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TrialFailure(
                f"timed out after {timeout_s:.0f} s", kind="timeout", log_tail=worker.log_tail()
            )
        try:
            event = events.get(timeout=min(remaining, 1.0))
        except queue.Empty:
            continue
        if event is None:
            worker.proc.wait(timeout=30)  # type: ignore[union-attr]
            raise TrialFailure(
                _exit_reason(worker.poll()), kind="crash", log_tail=worker.log_tail()
            )
        if "phase" in event and on_phase is not None:
            on_phase(event["phase"])
        elif "error" in event:
            raise TrialFailure(
                event["error"]["reason"],
                kind=event["error"]["kind"],
                log_tail=worker.log_tail(),
            )
        elif "result" in event:
            return event["result"], worker.log_tail()


def _read_events(worker: ManagedProcess, events: queue.Queue[dict[str, Any] | None]) -> None:
    assert worker.proc is not None and worker.proc.stdout is not None
    for line in worker.proc.stdout:
        try:
            events.put(json.loads(line))
        except json.JSONDecodeError:
            continue
    events.put(None)  # end of stream: the worker exited


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "worker stopped reporting"
    if code < 0:
        hint = " (killed: out of host memory?)" if code == -9 else ""
        return f"worker died from signal {-code}{hint}"
    return f"worker exited with status {code} without a result"
