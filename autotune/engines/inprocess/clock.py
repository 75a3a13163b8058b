"""The in-process engine's clock: on a CPU, wall time less the time its thread waited for a core.

A machine with other work shares its cores out in time slices, and how much an engine gets moves
with where the kernel happens to place the other processes: on the wall clock, a busy machine's
rate is lower, wider and drifts through the whole window. Linux counts, for every thread, the
time it was ready to run but waited on a run queue (the second field of
/proc/thread-self/schedstat, in nanoseconds). An engine that computes on its calling thread
alone (one torch thread) is timed on a clock that leaves that wait out: its figures say what the
configuration does on a core it has to itself, which is the machine it is deployed on. The share
of the load test spent waiting is recorded with the trial (`run_queue_wait_share`), so a busy
machine is never hidden.

With more than one torch thread the calling thread sleeps while the pool computes, and the
pool's waits are not its own: such an engine, and every GPU engine, keeps the wall clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

SCHEDSTAT = "/proc/thread-self/schedstat"


def run_queue_wait_s() -> float | None:
    """Seconds the calling thread has waited for a core since it started; None where the
    kernel does not say (not Linux, or schedstats compiled out)."""
    try:
        with open(SCHEDSTAT, encoding="ascii") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


# Slack for the two perf_counter readings around a schedstat read (their own cost).
_READ_SLACK_S = 1e-3


@dataclass
class EngineClock:
    """`now()` for every timestamp of a load test; `reason` says which clock it is.

    The kernel's counter is checked at every reading: it never runs backwards, and between two
    readings it never counts more wait than wall time passed (read between two wall readings,
    so a preemption around the read is no false alarm). A reading that fails either is no
    clock to time a load test on (a wait counter running faster than the wall clock would stop
    time, and a load test never end): from then on the engine keeps the wall clock, its
    `reason` says so and `fallback_reason` why, and `now()` never goes back.
    """

    on_core: bool
    reason: str
    fallback_reason: str | None = None
    _wait_at_start: float = 0.0
    _last_wait: float = 0.0  # the last plausible reading, since the start
    _last_wall: float = 0.0  # the wall time before that reading
    _last_now: float = 0.0
    _started: float = 0.0  # the wall time the clock was made

    def __post_init__(self) -> None:
        if self.on_core:
            self._last_wall = self._started = time.perf_counter()
            self._wait_at_start = run_queue_wait_s() or 0.0

    def now(self) -> float:
        if not self.on_core:
            wall = time.perf_counter() - self._last_wait  # continues where on-core time left
        else:
            wall = time.perf_counter() - self.waited_s()
        self._last_now = max(self._last_now, wall)
        return self._last_now

    def waited_s(self) -> float:
        """Run-queue wait of the engine's thread since this clock was made (0 on wall time;
        after a fallback, the wait up to it). Read from the thread that made the clock: the
        worker's main thread."""
        if not self.on_core:
            return self._last_wait
        before = time.perf_counter()
        raw = run_queue_wait_s()
        after = time.perf_counter()
        if raw is None:
            return self._fall_back(f"{SCHEDSTAT} could no longer be read")
        waited = raw - self._wait_at_start
        if waited < self._last_wait:
            return self._fall_back(
                f"the run-queue wait ran backwards ({self._last_wait:.6f} s, then {waited:.6f} s)"
            )
        # Between two readings, and since the start: a counter a little faster than the wall
        # clock passes every close pair of readings, but not the sum of them.
        if waited - self._last_wait > after - self._last_wall + _READ_SLACK_S or (
            waited > after - self._started + _READ_SLACK_S
        ):
            return self._fall_back(
                f"the run-queue wait grew by {waited - self._last_wait:.6f} s in "
                f"{after - self._last_wall:.6f} s of wall time"
            )
        self._last_wait, self._last_wall = waited, before
        return waited

    def _fall_back(self, why: str) -> float:
        self.on_core = False
        self.fallback_reason = f"the on-core clock's reading was implausible: {why}"
        self.reason = "wall clock (the on-core clock's readings were implausible)"
        return self._last_wait

    def describe(self) -> dict[str, str]:
        """What a trial records of its clock."""
        described = {"clock": self.reason}
        if self.fallback_reason is not None:
            described["clock_fallback_reason"] = self.fallback_reason
        return described


def engine_clock(device: str, torch_threads: int) -> EngineClock:
    """The clock for an engine on `device` that computes on `torch_threads` threads."""
    if device != "cpu":
        return EngineClock(False, "wall clock (a GPU engine's time is not spent on a run queue)")
    if torch_threads != 1:
        return EngineClock(
            False, f"wall clock ({torch_threads} torch threads: their waits are not measured)"
        )
    if run_queue_wait_s() is None:
        return EngineClock(False, f"wall clock ({SCHEDSTAT} is not readable here)")
    return EngineClock(True, "on-core clock (wall time less the engine thread's run-queue wait)")
