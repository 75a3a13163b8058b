"""Answers are not paid for twice, and screening stops a hopeless trial before its load test."""

from __future__ import annotations

from pathlib import Path

import pytest
from optuna.trial import TrialState
from small_space import MODEL, run_study, small_evalset, small_space

from autotune.accuracy.reuse import screening_ids
from autotune.accuracy.staged import FloorRequest
from autotune.engines.inprocess.session import WorkerSession
from autotune.engines.session import MeasurePlan
from autotune.evalset.dataset import load_evalset
from autotune.params import TrialConfig
from autotune.study.run.loop import EXHAUSTED_AFTER

pytestmark = pytest.mark.slow


def test_trials_that_differ_only_in_batch_size_reuse_the_answers(tmp_path: Path) -> None:
    space = small_space(
        tmp_path,
        trials=3,
        sampler={"n_startup_trials": 10},
        params={"batch_size": {"choices": [1, 2, 4]}},
    )
    result, study = run_study(space, study="r", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 3
    items = len(load_evalset(str(tmp_path / "evalset")).items)
    computed = [t.user_attrs["answers_computed"] for t in trials]
    assert computed[0] == items  # the reference answers every item
    assert computed[1:] == [0, 0]  # greedy answers do not depend on the batch size
    assert sum(computed) < len(trials) * items
    for trial in trials[1:]:
        assert trial.user_attrs["accuracy_reused_from"] == 0
        assert trial.user_attrs["item_scores"] == trials[0].user_attrs["item_scores"]
        # Reused answers still get their own latency measurement (how many requests fit in
        # the test's 2 s load depends on how busy the machine is).
        assert trial.user_attrs["measured_requests"] >= 1
        assert trial.user_attrs["e2e_latency_p50_ms"] > 0


def test_screening_stops_before_the_load_test(tmp_path: Path) -> None:
    # Codes only: at side 32 the reader still tells some colours apart (shapes 0.40), and one
    # right answer in eight leaves the first look undecided.
    evalset = load_evalset(str(small_evalset(tmp_path, n_text=12, n_shapes=0)))
    order = evalset.decision_order()
    subset = screening_ids(evalset, 8)
    assert subset == order[:8]
    # A reference that answered everything right, and a trial at image max side 32, where the
    # bundled reader reads nothing: the floor's first look, on the subset alone, already shows
    # a drop of more than 0.05.
    config = TrialConfig(dtype="float32", max_new_tokens=8, image_max_side=32)
    plan = MeasurePlan(
        warmup_requests=1,
        workload_requests=8,
        min_requests=8,
        max_requests=8,
        max_measure_s=60,
        max_load_s=60,
        target_ci_rel=0.03,
        confidence=0.95,
        accuracy_ids=order,
        floor=FloorRequest(
            order=order,
            stages=[8, len(order)],
            screening_items=8,
            reference_scores=dict.fromkeys(order, 1.0),
            margin=-0.05,
            confidence=0.95,
        ),
    )
    session = WorkerSession(
        model=str(MODEL),
        device="cpu",
        evalset=str(evalset.path),
        launch=config,
        trial_timeout_s=600,
    ).start()
    try:
        result = session.measure(config, plan)
    finally:
        session.close()
    assert result.screened_out is True
    assert result.timings == []  # no load test was run
    assert set(result.predictions) == set(subset)  # nor the rest of the set


def test_a_configuration_proposed_again_is_not_measured_again(tmp_path: Path) -> None:
    # One searched value: every trial after the reference proposes the reference again.
    space = small_space(tmp_path, trials=3, params={"batch_size": {"choices": [1]}})
    result, study = run_study(space, study="t", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    repeated = "[repeat, not counted] trial 1 (same configuration as trial 0, not re-run)"
    assert repeated in result.stderr
    # A repeated proposal does not count towards --trials: with nothing else to try, the
    # study stops once the sampler has repeated itself EXHAUSTED_AFTER times in a row.
    assert "the space looks exhausted" in result.stderr
    assert "[1/3]" in result.stderr and "[2/3]" not in result.stderr
    first, *twins = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(twins) == EXHAUSTED_AFTER
    assert first.user_attrs["launch_started"] is True
    for twin in twins:
        assert twin.user_attrs["duplicate_of"] == 0
        assert twin.values == first.values
        assert "is_reference" not in twin.user_attrs
        # A twin of the reference is still a candidate judged against it: zero difference.
        assert twin.user_attrs["paired_vs_reference"]["accuracy_diff"] == 0.0
