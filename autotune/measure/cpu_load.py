"""How busy the machine was while a load test ran: what the engine's threads waited for a core,
the kernel's CPU pressure and the load average.

On a busy CPU a wall-clock figure measures a moment as much as a configuration: beside two CPU
hogs on 2 cores an engine gets about half of them. Linux counts, for every thread, the time it
ran and the time it was ready to run but waited on a run queue (/proc/<pid>/task/<tid>/
schedstat, nanoseconds). Over an engine's threads, the share of their runnable time spent
waiting (`EngineWait.share`) bounds how much the machine slowed a CPU-bound engine down: its
rate was at least 1 - share of what idle cores would have given. Racing widens its bound by the
change of that share between the incumbent's load and the racing one
(autotune.measure.convergence.RaceBound), and every trial records it with the machine's CPU
pressure (/proc/pressure/cpu, the share of time some task waited) and load average, which
`autotune verify` compares.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

PRESSURE = Path("/proc/pressure/cpu")


def _task_times(pid: int) -> dict[tuple[int, str], tuple[int, int]]:
    """(ran, waited) nanoseconds of each thread of `pid`, by (pid, thread id)."""
    found: dict[tuple[int, str], tuple[int, int]] = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:  # the process has ended, or this is no Linux
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as handle:
                ran, waited = handle.read().split()[:2]
            found[(pid, tid)] = (int(ran), int(waited))
        except (OSError, ValueError):  # a thread that ended between the listing and the read
            continue
    return found


class EngineWait:
    """The share of an engine's runnable time its threads spent waiting for a core, since
    this was made. `pids`: the engine's processes, asked at each reading (a server starts
    workers of its own)."""

    def __init__(self, pids: Callable[[], Iterable[int]]) -> None:
        self.pids = pids
        self.start = self._times()

    def _times(self) -> dict[tuple[int, str], tuple[int, int]]:
        times: dict[tuple[int, str], tuple[int, int]] = {}
        for pid in self.pids():
            times.update(_task_times(pid))
        return times

    def share(self) -> float | None:
        """Waited / (ran + waited) over the engine's threads since the start; None where the
        kernel keeps no counts or the engine has not run."""
        ran = waited = 0
        for task, (task_ran, task_waited) in self._times().items():
            before_ran, before_waited = self.start.get(task, (0, 0))
            ran += max(0, task_ran - before_ran)
            waited += max(0, task_waited - before_waited)
        return waited / (ran + waited) if ran + waited > 0 else None


def own_process() -> list[int]:
    return [os.getpid()]


def process_tree(pid: int) -> list[int]:
    """`pid` and every process it started (a server's workers), as they are now."""
    import psutil

    try:
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:  # it has ended
        return [pid]


def pressure_total_s() -> float | None:
    """Seconds in which some task waited for a core, since boot (the kernel's CPU pressure);
    None where the kernel keeps none."""
    try:
        for line in PRESSURE.read_text(encoding="ascii").splitlines():
            if line.startswith("some "):
                total = dict(part.split("=", 1) for part in line.split()[1:])["total"]
                return int(total) / 1e6
    except (OSError, KeyError, ValueError):
        return None
    return None


class MachineLoad:
    """The machine's load over a stretch of time: its CPU pressure and load average."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.pressure_at_start = pressure_total_s()

    def figures(self) -> dict[str, str]:
        """What a measurement records (environment entries, as strings): the share of the
        stretch some task waited for a core, and the 1-minute load average at its end."""
        figures = {"load_average_1m": f"{os.getloadavg()[0]:.2f}"}
        now, elapsed = pressure_total_s(), time.monotonic() - self.started
        if now is not None and self.pressure_at_start is not None and elapsed > 0:
            share = min(1.0, max(0.0, (now - self.pressure_at_start) / elapsed))
            figures["cpu_pressure_share"] = f"{share:.3f}"
        return figures


class LoadSeen:
    """The load one measurement runs under, from when it was made: the engine's wait share
    (`share`, which racing reads as the load runs) and what the measurement records
    (`figures`). `pids`: the engine's processes."""

    def __init__(self, pids: Callable[[], Iterable[int]]) -> None:
        self.machine, self.engine = MachineLoad(), EngineWait(pids)

    def share(self) -> float | None:
        return self.engine.share()

    def figures(self) -> dict[str, str]:
        figures = self.machine.figures()
        share = self.engine.share()
        if share is not None:
            figures["engine_wait_share"] = f"{share:.3f}"
        return figures
