"""The named candidates after the first wait until a one-lever step has beaten the first
(autotune.study.proposals.queueing)."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from autotune.study.proposals.queueing import later_candidates_due
from autotune.study.proposals.steering import Step


def measured(rate: float, ci_rel: float, **attrs: object) -> optuna.trial.FrozenTrial:
    figures = {"throughput_output_tokens_per_s": rate, "throughput_ci_rel": ci_rel}
    return optuna.trial.create_trial(value=rate, user_attrs={**figures, **attrs})


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
