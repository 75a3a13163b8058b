"""The "x the reference" figure carries both intervals, and the named candidates after the
first wait until a one-lever step has beaten the first (autotune.report.ratio,
autotune.study.proposals.queueing)."""

from __future__ import annotations

import math

import optuna
from optuna.trial import TrialState

from autotune.report.ratio import versus_reference
from autotune.study.proposals.queueing import later_candidates_due
from autotune.study.proposals.steps import Step


def measured(rate: float, ci_rel: float | None, **attrs: object) -> optuna.trial.FrozenTrial:
    figures = {"throughput_output_tokens_per_s": rate}
    if ci_rel is not None:
        figures["throughput_ci_rel"] = ci_rel
    return optuna.trial.create_trial(value=rate, user_attrs={**figures, **attrs})


def test_the_ratio_carries_both_intervals_in_quadrature_on_the_log_scale() -> None:
    reference = measured(37.1, 0.083, is_reference=True)
    best = measured(2751.6, 0.066)
    reference.number, best.number = 0, 3
    ratio = versus_reference(best, reference)
    assert ratio is not None
    assert math.isclose(ratio.times, 2751.6 / 37.1)
    # Wider than either interval alone, narrower than their sum.
    assert 0.083 < ratio.ci_rel < 0.083 + 0.066
    assert math.isclose(math.log1p(ratio.ci_rel), math.hypot(math.log1p(0.083), math.log1p(0.066)))
    words = ratio.words()
    assert words.startswith("74×") and "±" in words and "37.1 tok/s ±8.3%" in words
    # A reference measured too briefly for an interval: the ratio says it has none.
    brief = measured(37.1, None, is_reference=True)
    brief.number = 0
    assert versus_reference(best, brief).ci_rel is None
    assert "no interval" in versus_reference(best, brief).words()
    assert versus_reference(reference, reference) is None


def _study(*trials: optuna.trial.FrozenTrial) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for trial in trials:
        study.add_trial(trial)
    return study


def test_later_candidates_wait_for_a_step_that_beats_the_first() -> None:
    reference = measured(37.0, 0.1, is_reference=True)
    first = measured(2000.0, 0.03, candidate="lmdeploy-graphs")
    on_launch = Step({"image_max_side": 512}, "image_max_side", 512, 1, new_launch=False)
    # Before the first candidate has a figure: nothing to step from, keep waiting.
    assert not later_candidates_due(_study(reference), None)
    study = _study(reference, first)
    # A request-time step from the first candidate: the steps go first.
    assert not later_candidates_due(study, on_launch)
    # No step left, or the next one leaves the running launch: queue them now.
    assert later_candidates_due(study, None)
    leaving = Step({"kv_cache_fraction": 0.15}, "kv_cache_fraction", 0.15, 1, new_launch=True)
    assert later_candidates_due(study, leaving)
    # A step has beaten the first: the next steps start from it, the candidates are raced.
    study.add_trial(measured(2600.0, 0.03, step={"lever": "image_max_side", "value": 512}))
    from_step = Step({"batch_size": 1}, "batch_size", 1, 2, new_launch=False)
    assert later_candidates_due(study, from_step)
    # A first candidate that failed leaves nothing to step from: the others go on.
    failed = optuna.trial.create_trial(state=TrialState.FAIL, user_attrs={"candidate": "x"})
    assert later_candidates_due(_study(reference, failed), None)
