"""Child process groups are stopped whole, whatever the child does with signals."""

from __future__ import annotations

import time
from pathlib import Path

from autotune.engines.process import ManagedProcess, group_alive, wait_group_gone


def test_stop_reaches_grandchildren(tmp_path: Path) -> None:
    proc = ManagedProcess(
        ["sh", "-c", "sleep 300 & sleep 300 & wait"], log_path=tmp_path / "log"
    ).start()
    time.sleep(0.3)
    assert group_alive(proc.pid)
    proc.stop(grace_s=2)
    assert wait_group_gone(proc.pid, timeout_s=5)


def test_sigterm_ignoring_child_is_killed_after_grace(tmp_path: Path) -> None:
    proc = ManagedProcess(
        ["sh", "-c", "trap '' TERM; sleep 300 & wait; sleep 300"], log_path=tmp_path / "log"
    ).start()
    time.sleep(0.3)
    started = time.monotonic()
    proc.stop(grace_s=0.5)
    assert wait_group_gone(proc.pid, timeout_s=60)
    # Killed after its grace, not after the 300 s its children would have slept (a bound a
    # busy machine cannot break: the event, not the speed).
    assert time.monotonic() - started < 60


def test_log_tail_keeps_the_last_lines(tmp_path: Path) -> None:
    with ManagedProcess(
        ["sh", "-c", "for i in $(seq 1 100); do echo line $i >&2; done"],
        log_path=tmp_path / "log",
    ) as proc:
        proc.proc.wait(timeout=10)  # type: ignore[union-attr]
        tail = proc.log_tail(lines=3)
    assert tail.splitlines() == ["line 98", "line 99", "line 100"]
