"""The budget's guess of the next trial's time (autotune.study.run.budget)."""

from __future__ import annotations

import optuna

from autotune.study.run.budget import FIRST_TRIAL_GUESS_S, Budget


def test_the_budget_does_not_judge_the_next_trial_by_the_reference() -> None:
    """On the H200 the transformers reference ran 200 s to its cap; the LMDeploy trials after
    it took 20-140 s. Judged by the reference, a 7-minute study started nothing else."""
    study = optuna.create_study()

    def finished(total_s: float, *, reference: bool) -> optuna.trial.FrozenTrial:
        attrs = {"time_s": {"startup": 15.0, "total": total_s}, "is_reference": reference}
        return optuna.trial.create_trial(value=1.0, user_attrs=attrs)

    study.add_trial(finished(200.0, reference=True))
    budget = Budget(420.0)
    assert budget.estimate(study, launch_backends=None) == FIRST_TRIAL_GUESS_S
    study.add_trial(finished(75.0, reference=False))
    assert budget.estimate(study, launch_backends=None) == 60.0  # 75 s less its start-up


def test_the_first_candidate_s_load_is_not_cut_by_the_reference_s_accuracy() -> None:
    """On an H100 the in-process reference answered its items in 255 s; reserved for the
    first LMDeploy candidate's pass, it left that candidate's load test 5 s."""
    study = optuna.create_study()

    def finished(accuracy_s: float, *, reference: bool) -> optuna.trial.FrozenTrial:
        times = {"startup": 19.0, "warmup": 25.0, "accuracy": accuracy_s, "total": 343.0}
        attrs = {"time_s": times, "is_reference": reference}
        return optuna.trial.create_trial(value=1.0, user_attrs=attrs)

    study.add_trial(finished(255.0, reference=True))
    budget = Budget(480.0)
    assert budget.overhead(study) == 0.0
    assert budget.measure_seconds(study, used_s=0.0, accuracy=True) == 480.0 - 343.0
    study.add_trial(finished(70.0, reference=False))
    assert budget.overhead(study) == 25.0 + 70.0
