"""The in-process engine's clock: on one CPU thread it leaves out the time the thread waited
for a core, so a busy machine does not slow the figures down; everywhere else it is the wall
clock, and the record says which. Real threads and a real CPU-bound neighbour on one core."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from autotune.engines.inprocess.clock import EngineClock, engine_clock, run_queue_wait_s

pytestmark = pytest.mark.skipif(
    run_queue_wait_s() is None, reason="the kernel keeps no run-queue waits here (not Linux)"
)


@pytest.fixture
def one_core_with_a_neighbour() -> Iterator[None]:
    """This thread and a busy-looping process pinned to the same core, for the block."""
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})  # the calling thread only (Linux affinity is per thread)
    hog = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
        start_new_session=True,  # its own scheduling group, as a user's other job would be
    )
    try:
        time.sleep(0.3)  # the neighbour is running before the clock starts
        yield
    finally:
        hog.kill()
        hog.wait()
        os.sched_setaffinity(0, before)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_the_on_core_clock_leaves_out_the_wait_for_a_shared_core(
    one_core_with_a_neighbour: None,
) -> None:
    clock = engine_clock("cpu", 1)
    assert clock.on_core, clock.reason
    wall0, on_core0, cpu0 = time.perf_counter(), clock.now(), time.thread_time()
    _spin(1.5)
    wall_s = time.perf_counter() - wall0
    on_core_s = clock.now() - on_core0
    cpu_s = time.thread_time() - cpu0
    # Two runnable tasks on one core: the thread held it about half the time. Any other load
    # on the machine only lengthens the wait, so these bounds hold beside busy cores too.
    assert clock.waited_s() > 0.2 * wall_s
    assert on_core_s < 0.8 * wall_s
    # What is left is the time the thread computed (it never slept).
    assert on_core_s == pytest.approx(cpu_s, rel=0.15)


def _slept_on_core_s(clock: EngineClock) -> tuple[float, float]:
    """(on-core seconds, wall seconds) across a 0.2 s sleep."""
    wall0, on_core0 = time.perf_counter(), clock.now()
    time.sleep(0.2)  # sleeping is not waiting for a core: it counts
    return clock.now() - on_core0, time.perf_counter() - wall0


def test_on_idle_cores_the_two_clocks_agree_and_the_wall_clock_stays_for_the_rest() -> None:
    clock = engine_clock("cpu", 1)
    # The sleep counts whole; only the wait for a core after it (none on idle cores, any
    # amount beside busy ones) is left out, and never more than the wall time passed. Beside
    # two CPU hogs and a busy test run (CI run 8) one sleep read only 0.014 s on core, so the
    # sleep is taken five times: at least one of them must count whole.
    tries = [_slept_on_core_s(clock) for _ in range(5)]
    assert all(0 <= on_core_s <= wall_s for on_core_s, wall_s in tries), tries
    assert max(on_core_s for on_core_s, _ in tries) >= 0.2, tries
    for device, threads, why in [("cpu", 2, "2 torch threads"), ("cuda", 1, "GPU engine")]:
        other = engine_clock(device, threads)
        assert not other.on_core and why in other.reason
        assert other.waited_s() == 0.0
        before = time.perf_counter()
        assert before <= other.now() <= time.perf_counter()
