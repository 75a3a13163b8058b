"""The parent side of a worker process: one model load, many trials, contained failures.

The worker loads the model once (`startup_s`) and then measures each trial it is sent. A trial
that crashes the worker, runs out of memory or outlives its time limit fails alone: the worker's
process group is stopped and the next trial starts a new one.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import sys
import threading
import time
from typing import Any

from autotune.checkpoints.adapters import Adapter
from autotune.engines.inprocess.worker import LaunchRequest, MeasureCommand
from autotune.engines.process import ManagedProcess
from autotune.engines.scratch import make_scratch
from autotune.engines.session import (
    EstimateCallback,
    MeasurePlan,
    PhaseCallback,
    new_launch_id,
)
from autotune.engines.threads import ThreadChoice
from autotune.errors import TrialFailure
from autotune.params import TrialConfig
from autotune.records import SessionResult


class WorkerSession:
    """A worker process holding one loaded model (one launch)."""

    def __init__(
        self,
        *,
        model: str,
        device: str,
        evalset: str,
        launch: TrialConfig,
        trial_timeout_s: float,
        pinned: dict[str, str] | None = None,
        adapters: list[Adapter] | None = None,
        threads: ThreadChoice | None = None,
    ) -> None:
        """`pinned`: environment that gives the worker its GPUs (autotune run --gpus);
        `adapters`: LoRA adapters the worker loads, the first one active; `threads`: the
        CPU threads its torch may use (torch's default, one a core, when None)."""
        self.launch_id = new_launch_id()
        self.launch_key = launch.launch_key()
        self.startup_s = 0.0
        self.load_s = 0.0
        self.pid: int | None = None
        self.trial_timeout_s = trial_timeout_s
        self._workdir = make_scratch("autotune-worker-")
        request = LaunchRequest(
            model=model,
            device=device,
            evalset=evalset,
            launch=launch,
            adapters=[adapter.to_dict() for adapter in adapters or []],
        )
        request_path = self._workdir / "launch.json"
        request_path.write_text(request.model_dump_json(), encoding="utf-8")
        self.threads = threads
        extra_env = {**(pinned or {}), **(threads.env() if threads else {})}
        self.process = ManagedProcess(
            [sys.executable, "-m", "autotune.engines.inprocess.worker", str(request_path)],
            log_path=self._workdir / "worker.log",
            env={**os.environ, **extra_env} if extra_env else None,
            capture_stdout=True,
            capture_stdin=True,
        )
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._broken = False
        # The worker is idle, reading its stdin: loaded, and not measuring a trial.
        self._idle = False

    def start(self, *, on_phase: PhaseCallback | None = None) -> WorkerSession:
        """Start the worker and wait until its model is loaded.

        `startup_s` runs from the process start to ready (interpreter, imports, model load),
        as a server's start-up runs from its launch to its first answer.
        """
        started = time.perf_counter()
        try:
            self.process.start()
            threading.Thread(target=self._read_events, daemon=True).start()
            ready = self._follow("ready", self.trial_timeout_s, on_phase)
        except BaseException:
            self.close()
            raise
        self._idle = True
        self.startup_s = time.perf_counter() - started
        self.load_s = float(ready["startup_s"])  # the model load alone, inside the worker
        self.pid = int(ready["pid"])
        return self

    def measure(
        self,
        config: TrialConfig,
        plan: MeasurePlan,
        *,
        on_phase: PhaseCallback | None = None,
        on_estimate: EstimateCallback | None = None,
    ) -> SessionResult:
        command = MeasureCommand(config=config, plan=plan)
        try:
            stdin = self.process.proc.stdin  # type: ignore[union-attr]
            assert stdin is not None
            self._idle = False
            stdin.write(json.dumps({"measure": command.model_dump(mode="json")}) + "\n")
            stdin.flush()
            raw = self._follow("result", self.trial_timeout_s, on_phase, on_estimate)
            self._idle = True
        except BrokenPipeError:
            self.close()
            raise TrialFailure(
                "the worker exited before the trial started", kind="crash", log_tail=self.log_tail()
            ) from None
        except BaseException:
            # A failed or interrupted trial leaves the engine in an unknown state.
            self.close()
            raise
        result = SessionResult.model_validate(raw)
        result.environment = {
            **result.environment,
            "runner": "inprocess",
            "worker_pid": str(self.pid),
        }
        if self.threads is not None:  # the count itself comes from the worker's torch
            result.environment["torch_threads_reason"] = self.threads.reason
        return result

    def alive(self) -> bool:
        return not self._broken and self.process.poll() is None

    def served(self, config: TrialConfig, plan: MeasurePlan) -> None:
        return None  # no HTTP: the worker answers through its own pipe

    def close(self) -> None:
        self._broken = True
        proc = self.process.proc
        # Ask an idle worker first: one that quits by itself frees its GPU memory cleanly. One
        # still loading, or stuck in a trial that timed out, reads no stdin: asking it would only
        # wait the 5 s out before stop() takes its process group down anyway.
        if self._idle and proc is not None and proc.poll() is None and proc.stdin is not None:
            try:
                proc.stdin.write(json.dumps({"quit": True}) + "\n")
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                pass
        self.process.stop()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def log_tail(self) -> str:
        return self.process.log_tail()

    def _read_events(self) -> None:
        proc = self.process.proc
        assert proc is not None and proc.stdout is not None
        try:
            for line in proc.stdout:
                try:
                    self._events.put(json.loads(line))
                except json.JSONDecodeError:
                    continue
        except ValueError:  # the pipe was closed under us by stop()
            pass
        self._events.put(None)  # end of stream: the worker exited

    def _follow(
        self,
        wanted: str,
        timeout_s: float,
        on_phase: PhaseCallback | None,
        on_estimate: EstimateCallback | None = None,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TrialFailure(
                    f"timed out after {timeout_s:.0f} s", kind="timeout", log_tail=self.log_tail()
                )
            try:
                event = self._events.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if event is None:
                proc = self.process.proc
                assert proc is not None
                proc.wait(timeout=30)
                raise TrialFailure(
                    _exit_reason(proc.poll()), kind="crash", log_tail=self.log_tail()
                )
            if "phase" in event:
                if on_phase is not None:
                    on_phase(event["phase"])
            elif "estimate" in event:
                if on_estimate is not None:
                    on_estimate(dict(event["estimate"]))
            elif "error" in event:
                raise TrialFailure(
                    event["error"]["reason"], kind=event["error"]["kind"], log_tail=self.log_tail()
                )
            elif wanted in event:
                return dict(event[wanted])


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "worker stopped reporting"
    if code < 0:
        hint = " (killed: out of host memory?)" if code == -9 else ""
        return f"worker died from signal {-code}{hint}"
    return f"worker exited with status {code} without a result"
