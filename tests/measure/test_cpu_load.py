"""The load a load test ran under (autotune.measure.cpu_load), and racing's bound widened by
its change (autotune.measure.convergence.RaceBound): real threads and a real CPU-bound
neighbour pinned to their core, as tests/engines/inprocess/test_clock.py does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from autotune.measure.convergence import MAX_WAIT_SHARE, RaceBound
from autotune.measure.cpu_load import EngineWait, LoadSeen, own_process, process_tree
from autotune.measure.steady import SteadyState

linux = pytest.mark.skipif(
    not os.path.exists("/proc/self/task"), reason="the kernel keeps no run-queue waits here"
)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.fixture
def one_core_with_a_neighbour() -> Iterator[None]:
    """This thread and a busy-looping process pinned to the same core, for the block."""
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})
    hog = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
        start_new_session=True,
    )
    try:
        time.sleep(0.3)
        yield
    finally:
        hog.kill()
        hog.wait()
        os.sched_setaffinity(0, before)


@linux
def test_an_engine_beside_a_neighbour_on_its_core_waits_a_share_of_its_time(
    one_core_with_a_neighbour: None,
) -> None:
    wait = EngineWait(own_process)
    _spin(1.5)
    share = wait.share()
    # Two runnable tasks on one core: the thread waited about half its runnable time. Other
    # load only lengthens the wait, so the bound holds beside busy cores too.
    assert share is not None and 0.2 < share <= 1.0, share


@linux
def test_the_share_reads_every_thread_of_a_process_tree_and_the_machine_figures() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_tree(os.getpid())[0] == os.getpid()
        assert child.pid in process_tree(os.getpid())
        seen = LoadSeen(lambda: process_tree(os.getpid()))
        _spin(0.3)
        figures = seen.figures()
    finally:
        child.kill()
        child.wait()
    assert 0.0 <= float(figures["engine_wait_share"]) <= 1.0
    assert float(figures["load_average_1m"]) >= 0.0
    if "cpu_pressure_share" in figures:  # where the kernel keeps CPU pressure
        assert 0.0 <= float(figures["cpu_pressure_share"]) <= 1.0
    # A process that has ended reads as itself alone, and nothing of it.
    assert process_tree(child.pid) == [child.pid]


def _estimate(rate: float, ci_rel: float) -> SteadyState:
    return SteadyState(
        tokens_per_s=rate, ci_rel=ci_rel, warmup_s=1.0, window_s=10.0, batches=12,
        batch_s=0.8, lag1=0.0, settled=True, correlation_tested=True,
    )  # fmt: skip


def test_a_heavier_load_than_the_incumbent_s_widens_the_race_and_a_lighter_one_does_not() -> None:
    bound = RaceBound(tokens_per_s_low=100.0, wait_share=0.1)
    half_speed = _estimate(55.0, 0.05)  # the same configuration, beside two hogs
    assert bound.beaten(half_speed, 0.95)  # the load unknown: it lost
    assert bound.beaten(half_speed, 0.95, wait_share=0.1)  # the same load: it lost
    assert not bound.beaten(half_speed, 0.95, wait_share=0.5)  # it waited half: not beaten
    assert bound.slowed_by(0.05) == 1.0  # a lighter load never narrows the race
    assert bound.slowed_by(0.55) == pytest.approx(0.9 / 0.45)
    # Truly slower, beside the same heavier load: still stopped.
    assert bound.beaten(_estimate(20.0, 0.05), 0.95, wait_share=0.5)
    # An engine that waited for nearly all of its time widens by a bounded factor.
    assert bound.slowed_by(1.0) == pytest.approx(0.9 / (1 - MAX_WAIT_SHARE))
