"""The search record: read from the floor's verdicts, the speeds and the limits, never from a
confirmation's outcome (autotune.study.results.search_record)."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import create_trial

from autotune.study.results.search_record import search_record, sets_records

_WITHIN = {"accuracy": -0.01, "memory": -1.0, "latency": 0.0, "deployable": 0.0}


def _trial(study: optuna.Study, speed: float, **attrs: Any) -> int:
    attrs.setdefault("constraints", _WITHIN)
    attrs.setdefault("deployable", True)
    study.add_trial(create_trial(values=[speed], user_attrs=attrs))
    return study.trials[-1].number


def _passed(decision: str = "feasible") -> dict[str, Any]:
    return {"decision": decision, "test": "sequential"}


def test_the_fastest_floor_passed_trial_holds_the_record_whatever_its_confirmation() -> None:
    study = optuna.create_study(direction="maximize")
    reference = _trial(study, 10.0, is_reference=True)
    assert search_record(study).number == reference  # type: ignore[union-attr]
    failed = {"decision": "not confirmed", "index": 1, "error": 0.06}
    record = _trial(study, 30.0, paired_vs_reference=_passed(), confirmation=failed)
    _trial(study, 50.0, paired_vs_reference=_passed("infeasible"))  # the floor refused it
    _trial(study, 60.0, paired_vs_reference=_passed(), deployable=False)  # a what-if
    over = {**_WITHIN, "memory": 2048.0}
    _trial(study, 70.0, paired_vs_reference=_passed(), constraints=over)
    _trial(study, 80.0, accuracy_not_judged={"reason": "memory", "words": "over"})
    found = search_record(study)
    assert found is not None and found.number == record and found.value == 30.0
    assert found.beaten_by(31.0) and not found.beaten_by(30.0)
    assert found.words() == f"slower than trial #{record} the floor passed"


def test_identical_answers_pass_and_a_reference_that_cannot_deploy_sets_no_record() -> None:
    study = optuna.create_study(direction="maximize")
    _trial(study, 100.0, is_reference=True, deployable=False)
    assert search_record(study) is None  # every trial is judged
    same = _trial(study, 5.0, paired_vs_reference=_passed("identical answers"))
    assert sets_records(study.trials[same])
    assert search_record(study).number == same  # type: ignore[union-attr]


def test_a_minimised_first_objective_is_beaten_from_below() -> None:
    study = optuna.create_study(direction="minimize")
    _trial(study, 200.0, is_reference=True)
    best = _trial(study, 120.0, paired_vs_reference=_passed())
    found = search_record(study)
    assert found is not None and found.number == best
    assert found.beaten_by(100.0) and not found.beaten_by(150.0)


def test_a_timed_pass_counts_as_passed() -> None:
    study = optuna.create_study(direction="maximize")
    timed = _trial(study, 40.0, accuracy_timed_items=120.0)
    assert search_record(study).number == timed  # type: ignore[union-attr]
