"""A record of every process group autotune starts, so nothing a killed run left keeps running.

The guard (autotune.engines.guard) takes a command's group down when autotune dies; this is
the second line: each group is recorded in a per-user folder with the process that owns it,
and the next `autotune run`, `eval` or `verify` stops any group whose owner is gone, and says
so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import psutil

REGISTRY = Path(tempfile.gettempdir()) / f"autotune-processes-{os.getuid()}"
# A launch's scratch folder (its server logs) starts with this; one whose owner died without
# removing it goes with the group it served.
SCRATCH_PREFIX = "autotune-server-"


def _owner() -> dict[str, float]:
    me = psutil.Process()
    return {"pid": me.pid, "started": me.create_time()}


def record(pgid: int, argv: list[str], log_path: Path | None = None) -> None:
    """Note that this process started group `pgid`, logging to `log_path` (best effort: a
    full disk is no reason to fail a trial)."""
    with contextlib.suppress(OSError):
        REGISTRY.mkdir(mode=0o700, exist_ok=True)
        entry = {"pgid": pgid, "owner": _owner(), "command": argv[:3]}
        if log_path is not None:
            entry["log"] = str(log_path)
        (REGISTRY / f"{pgid}.json").write_text(json.dumps(entry), encoding="utf-8")


def forget(pgid: int) -> None:
    with contextlib.suppress(OSError):
        (REGISTRY / f"{pgid}.json").unlink()


def _owner_alive(owner: dict[str, float]) -> bool:
    try:
        return abs(psutil.Process(int(owner["pid"])).create_time() - owner["started"]) < 1.0
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies wait for a reaper, and hold nothing)."""
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def clean_up() -> list[str]:
    """Stop the recorded groups whose owner is gone; one line for each group stopped."""
    stopped = []
    for path in sorted(REGISTRY.glob("*.json")) if REGISTRY.is_dir() else []:
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            pgid = int(entry["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _owner_alive(entry.get("owner") or {}):
            continue  # a run in progress (this one, or another) still owns it
        if _group_alive(pgid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            command = " ".join(str(word) for word in entry.get("command") or [])
            stopped.append(
                f"stopped process group {pgid} ({command}) left running by an earlier run "
                f"(pid {entry['owner'].get('pid')}) that did not stop it"
            )
        _remove_scratch(entry.get("log"))
        forget(pgid)
    return stopped


def _remove_scratch(log: object) -> None:
    """Remove the scratch folder of a dead owner's launch (only a folder autotune made)."""
    if not isinstance(log, str):
        return
    folder = Path(log).parent
    if folder.name.startswith(SCRATCH_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)
