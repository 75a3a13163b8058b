"""Reading a study back: feasibility, the Pareto front, the recommendation, reuse."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from autotune.accuracy.reuse import find_reusable, screening_ids
from autotune.errors import StudyError
from autotune.evalset.dataset import load_evalset
from autotune.measure.summary import with_launch_spread
from autotune.study.results.select import is_feasible, pareto_front, recommend, tied


def add(
    study: optuna.Study,
    number_values: tuple[float, float],
    *,
    violation: float = -1.0,
    state: TrialState = TrialState.COMPLETE,
    key: str = "k",
) -> None:
    study.add_trial(
        create_trial(
            state=state,
            values=list(number_values) if state == TrialState.COMPLETE else None,
            params={"batch_size": 1},
            distributions={"batch_size": CategoricalDistribution([1, 2])},
            user_attrs={
                "constraints": {"accuracy": violation, "memory": -1.0, "latency": 0.0},
                "output_key": key,
                "item_passed": {"a": True},
            },
        )
    )


def new_study() -> optuna.Study:
    return optuna.create_study(directions=["maximize", "minimize"])


def test_recommendation_is_feasible_and_best_on_the_first_objective() -> None:
    study = new_study()
    add(study, (100.0, 50.0))  # 0: feasible
    add(study, (300.0, 40.0), violation=0.2)  # 1: fastest but infeasible
    add(study, (200.0, 80.0))  # 2: feasible, faster than 0, slower latency
    add(study, (150.0, 90.0))  # 3: dominated by 2
    rec = recommend(study)
    assert rec.feasible and rec.trial.number == 2
    assert [t.number for t in rec.front] == [0, 2]
    assert not is_feasible(study.trials[1])


def test_best_effort_when_nothing_is_feasible() -> None:
    study = new_study()
    add(study, (100.0, 50.0), violation=0.3)
    add(study, (90.0, 50.0), violation=0.1)
    rec = recommend(study)
    assert not rec.feasible and rec.trial.number == 1
    assert "best effort" in rec.reason


def test_no_completed_trial_is_a_clear_error() -> None:
    study = new_study()
    add(study, (0, 0), state=TrialState.FAIL)
    with pytest.raises(StudyError, match="no completed trial"):
        recommend(study)


def test_pareto_front_respects_directions() -> None:
    study = new_study()
    add(study, (1.0, 1.0))
    add(study, (2.0, 2.0))
    add(study, (2.0, 1.0))
    front = pareto_front(study.trials, ["maximize", "minimize"])
    assert [t.number for t in front] == [2]


def test_reuse_finds_only_completed_trials_with_the_same_key() -> None:
    study = new_study()
    add(study, (1.0, 1.0), key="a", state=TrialState.FAIL)
    add(study, (1.0, 1.0), key="b")
    assert find_reusable(study, "a") is None
    found = find_reusable(study, "b")
    assert found is not None and found.number == 1


def test_screening_subset_covers_every_category() -> None:
    evalset = load_evalset("smoke")
    ids = screening_ids(evalset, 6)
    assert len(ids) == len(set(ids)) == 6
    categories = {item.category for item in evalset.items if item.id in ids}
    assert categories == {item.category for item in evalset.items}
    assert ids == screening_ids(evalset, 6)  # fixed subset


def measured(tps: float, *, within: float, total: float, launch: str) -> optuna.trial.FrozenTrial:
    return create_trial(
        state=TrialState.COMPLETE,
        values=[tps, 100.0],
        params={"batch_size": 1},
        distributions={"batch_size": CategoricalDistribution([1, 2])},
        user_attrs={
            "throughput_output_tokens_per_s": tps,
            "throughput_ci_within_rel": within,
            "throughput_ci_rel": total,
            "launch_id": launch,
        },
    )


def test_trials_on_one_launch_compare_within_it_and_across_launches_with_their_spread() -> None:
    # 2187 ±1% and 2111 ±1% on one launch: apart, whatever the launches' spread.
    a = measured(2187.0, within=0.01, total=0.06, launch="L1")
    b = measured(2111.0, within=0.01, total=0.06, launch="L1")
    assert not tied(a, b)
    # The same figures from two launches overlap once the spread between launches counts.
    c = measured(2111.0, within=0.01, total=0.06, launch="L2")
    assert tied(a, c)
    # A trial measured too briefly for an interval (NaN) is known faster than nothing.
    short = measured(5000.0, within=float("nan"), total=float("nan"), launch="L3")
    assert tied(a, short)


def test_the_launch_spread_widens_the_recorded_interval_in_quadrature() -> None:
    assert with_launch_spread(0.03, 0.0, 0.95) == 0.03
    assert with_launch_spread(0.03, 0.03, 0.95) == pytest.approx(math.hypot(0.03, 1.959964 * 0.03))
    assert math.isnan(with_launch_spread(float("nan"), 0.03, 0.95))
