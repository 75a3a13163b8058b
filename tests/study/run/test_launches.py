"""One engine launch, many trials; and a budget that stops a study cleanly. Real processes.

The swift deploy side of the grouping (one server for the request-time trials of a launch)
is tested in tests/engines/test_server_runner.py::test_smoke_swift_study_then_verify.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from optuna.trial import TrialState
from small_space import run_study, small_space

pytestmark = pytest.mark.slow


def test_request_time_trials_share_one_worker_per_launch(tmp_path: Path) -> None:
    space = small_space(
        tmp_path,
        trials=6,
        params={
            "attn_implementation": {"choices": ["sdpa", "eager"]},
            "image_max_side": {"choices": [None, 128, 64]},
            "batch_size": {"choices": [1, 2]},
        },
        launches={"trials_per_launch": 3},
        sampler={"n_startup_trials": 6},
    )
    result, study = run_study(space, study="l", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    measured = [t for t in study.trials if "duplicate_of" not in t.user_attrs]
    assert [t.state for t in measured] == [TrialState.COMPLETE] * 6
    launches: dict[str, list] = {}
    for trial in measured:
        launches.setdefault(trial.user_attrs["launch_id"], []).append(trial)
    ordered = sorted(launches.values(), key=lambda group: group[0].number)
    for group in ordered:
        # One worker process per launch, loaded once, with one set of launch parameters.
        assert len({t.user_attrs["environment"]["worker_pid"] for t in group}) == 1
        assert len({t.user_attrs["config"]["attn_implementation"] for t in group}) == 1
        assert [t.user_attrs["launch_started"] for t in group] == [True] + [False] * (
            len(group) - 1
        )
        assert group[0].user_attrs["time_s"]["startup"] > 0
        assert all(t.user_attrs["time_s"]["startup"] == 0 for t in group[1:])
    for trial in measured:
        # One torch thread on a CPU (the suite's OMP_NUM_THREADS=1): timed on the on-core
        # clock, with the share of the load test spent waiting for a core recorded.
        environment = trial.user_attrs["environment"]
        assert environment["clock"].startswith("on-core clock"), environment
        assert 0.0 <= float(environment["run_queue_wait_share"]) < 1.0
    pids = {t.user_attrs["environment"]["worker_pid"] for t in measured}
    assert len(pids) == len(launches) < len(measured)
    # The sampler keeps a launch for trials_per_launch trials; a new launch only ever starts
    # for other launch parameters.
    assert all(len(group) >= 3 for group in ordered[:-1])
    keys = [group[0].user_attrs["config"]["attn_implementation"] for group in ordered]
    assert all(a != b for a, b in itertools.pairwise(keys))
    assert "reused launch" in result.stderr and "start-up" in result.stderr


def test_budget_stops_the_study_cleanly_and_a_resume_keeps_to_it(tmp_path: Path) -> None:
    space = small_space(
        tmp_path,
        trials=40,
        params={  # 32 configurations: more than the budget can measure
            "image_max_side": {"choices": [None, 256, 128, 64]},
            "batch_size": {"choices": [1, 2, 4, 8]},
            "repetition_penalty": {"choices": [1.0, 1.05]},
        },
    )
    result, study = run_study(space, study="b", cwd=tmp_path, extra=("--budget", "20s"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "budget:" in result.stderr and "stopping here" in result.stderr
    trials = study.trials
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
    counted = [t for t in trials if "duplicate_of" not in t.user_attrs]
    assert 1 <= len(counted) < 40
    spent = sum(t.user_attrs["time_s"]["total"] for t in trials)
    # No trial starts once the budget is spent: everything before the last trial fits in it.
    # (How far the last one overshoots depends on how busy the machine is: not asserted.)
    last = max(trials, key=lambda t: t.number)
    assert spent - last.user_attrs["time_s"]["total"] <= 20, spent
    assert "time:" in result.stderr and "measuring" in result.stderr

    again, resumed = run_study(space, study="b", cwd=tmp_path, extra=("--budget", "20s"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "budget:" in again.stderr
    assert len(resumed.trials) == len(trials)  # no trial started past the budget

    bad, _ = run_study(space, study="b2", cwd=tmp_path, extra=("--budget", "soon"))
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert lines == ["error: --budget: 'soon' is not a duration; write e.g. 90s, 30m, 1h or 1h30m"]
    assert not (tmp_path / "b2.db").exists()
    assert not math.isnan(spent)
