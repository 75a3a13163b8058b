"""The in-process engine's CPU threads: chosen from the cores the run may use, applied by torch
inside the worker, and recorded in each trial's environment. Real studies, real workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from optuna.trial import TrialState
from small_space import run_study, small_space

from autotune.engines import threads
from autotune.engines.threads import ENGINES_AT_ONCE_ENV, choose_threads


@pytest.fixture
def no_thread_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The user's environment sets no thread count (the suite pins OMP_NUM_THREADS=1)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", ENGINES_AT_ONCE_ENV):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("cores", "engines", "expected"),
    [(1, 1, 1), (2, 1, 1), (4, 1, 3), (16, 1, 15), (16, 2, 7), (16, 8, 1), (2, 4, 1)],
)
def test_an_engine_gets_its_share_of_the_cores_less_one_for_the_study(
    no_thread_env: pytest.MonkeyPatch, cores: int, engines: int, expected: int
) -> None:
    no_thread_env.setattr(threads, "usable_cores", lambda: cores)
    no_thread_env.setenv(ENGINES_AT_ONCE_ENV, str(engines))
    choice = choose_threads(None)
    assert choice.threads == expected
    assert f"{cores} usable cores" in choice.reason
    assert choice.env() == {"OMP_NUM_THREADS": str(expected), "MKL_NUM_THREADS": str(expected)}


def test_the_space_then_the_users_environment_decide_before_the_cores(
    no_thread_env: pytest.MonkeyPatch,
) -> None:
    no_thread_env.setattr(threads, "usable_cores", lambda: 16)
    no_thread_env.setenv("OMP_NUM_THREADS", "3")
    assert choose_threads(2).threads == 2
    assert "cpu_threads: 2" in choose_threads(2).reason
    assert choose_threads(None).threads == 3
    assert "OMP_NUM_THREADS=3" in choose_threads(None).reason
    no_thread_env.setenv("OMP_NUM_THREADS", "lots")  # not a count: the cores decide
    assert choose_threads(None).threads == 15


def test_usable_cores_follow_the_affinity() -> None:
    assert threads.usable_cores() == len(os.sched_getaffinity(0))


@pytest.mark.slow
def test_the_choice_is_applied_in_the_worker_and_recorded(tmp_path: Path) -> None:
    """The count in the record is what the worker's torch reports, not what was asked."""
    # The suite's OMP_NUM_THREADS=1 reaches the study: the space's 2 must win over it.
    # Two torch threads on a machine that CI keeps busier than its cores spin at every barrier:
    # one request took 2.4 s there, past the loop tests' 2 s cap, and a reference without a
    # steady window fails the study. This test reads the record, not the figures, so its load
    # is bounded by its request count and given the time that count takes on a busy machine.
    workload = {"warmup_requests": 1, "requests": 2, "max_requests": 6}
    space = small_space(
        tmp_path,
        trials=2,
        cpu_threads=2,
        params={"batch_size": {"choices": [2]}},
        workload={**workload, "max_measure_s": 30, "max_warmup_s": 10},
    )
    result, study = run_study(space, study="threads", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    measured = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(measured) == 2
    for trial in measured:
        environment = trial.user_attrs["environment"]
        assert environment["torch_threads"] == "2"
        assert environment["torch_threads_reason"] == "cpu_threads: 2 in the space"
        # Two threads: the calling thread's run-queue wait says nothing of the pool's.
        assert environment["clock"].startswith("wall clock (2 torch threads")
        assert "run_queue_wait_share" not in environment
