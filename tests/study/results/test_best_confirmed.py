"""The best confirmed trial: the reference where it can be recommended, else the fastest trial
confirmed on the held-out items inside every limit (autotune.study.results.best_confirmed)."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import create_trial

from autotune.records.machine import Machine
from autotune.study.results.best_confirmed import best_confirmed, counts_as_confirmed

_WITHIN = {"accuracy": -0.01, "memory": -1.0, "latency": 0.0, "deployable": 0.0}
_CONFIRMED = {"decision": "confirmed", "index": 1, "error": 0.06}
_FAILED = {"decision": "not confirmed", "index": 1, "error": 0.06}


def _trial(study: optuna.Study, speed: float, **attrs: Any) -> int:
    attrs.setdefault("constraints", _WITHIN)
    attrs.setdefault("deployable", True)
    attrs.setdefault("paired_vs_reference", {"decision": "feasible", "test": "sequential"})
    study.add_trial(create_trial(values=[speed], user_attrs=attrs))
    return study.trials[-1].number


def test_only_a_confirmed_trial_inside_every_limit_counts() -> None:
    study = optuna.create_study(direction="maximize")
    reference = _trial(study, 10.0, is_reference=True)
    assert best_confirmed(study).number == reference  # type: ignore[union-attr]
    confirmed = _trial(study, 30.0, confirmation=_CONFIRMED)
    _trial(study, 50.0, confirmation=_FAILED)  # the floor passed it, its confirmation not
    _trial(study, 55.0)  # the floor passed it, never confirmed
    _trial(study, 60.0, confirmation=_CONFIRMED, deployable=False)  # a what-if
    _trial(study, 70.0, confirmation=_CONFIRMED, constraints={**_WITHIN, "memory": 2048.0})
    _trial(study, 80.0, accuracy_not_judged={"reason": "memory", "words": "over"})
    skipped = {"confirmed_trial": confirmed, "words": "slower"}
    _trial(study, 90.0, confirmation_skipped=skipped)
    found = best_confirmed(study)
    assert found is not None and found.number == confirmed and found.value == 30.0
    assert found.beaten_by(31.0) and not found.beaten_by(30.0)
    why = found.not_confirmed()
    assert why.confirmed_trial == confirmed
    assert why.line() == f"not confirmed: slower than trial #{confirmed}, already confirmed"


def test_a_reference_that_cannot_deploy_counts_not() -> None:
    study = optuna.create_study(direction="maximize")
    _trial(study, 100.0, is_reference=True, deployable=False)
    assert best_confirmed(study) is None  # every trial the floor passes is confirmed
    deployable = _trial(study, 50.0, is_reference=True)
    found = best_confirmed(study)
    assert found is not None and found.number == deployable
    assert "the reference" in (found.not_confirmed().words or "")


def test_a_minimised_first_objective_is_beaten_from_below() -> None:
    study = optuna.create_study(direction="minimize")
    _trial(study, 200.0, is_reference=True)
    best = _trial(study, 120.0, confirmation=_CONFIRMED)
    found = best_confirmed(study)
    assert found is not None and found.number == best
    assert found.beaten_by(100.0) and not found.beaten_by(150.0)


def test_a_timed_confirmation_counts_and_a_skipped_one_not() -> None:
    study = optuna.create_study(direction="maximize")
    skipped = {"confirmed_trial": 0, "words": "slower"}
    _trial(study, 60.0, accuracy_timed_items=80.0, paired_vs_reference=None,
           confirmation_skipped=skipped)  # fmt: skip
    assert not counts_as_confirmed(study.trials[-1])
    timed = _trial(study, 40.0, accuracy_timed_items=120.0, paired_vs_reference=None)
    assert best_confirmed(study).number == timed  # type: ignore[union-attr]


def test_a_trial_is_compared_with_its_own_group_alone() -> None:
    study = optuna.create_study(direction="maximize")
    old, new = Machine.grouped(gpu="A100").written(), Machine.grouped(gpu="H100").written()
    _trial(study, 10.0, is_reference=True, machine=old)
    fast_old = _trial(study, 90.0, confirmation=_CONFIRMED, machine=old)
    reference_new = _trial(study, 20.0, is_reference=True, machine=new)
    assert best_confirmed(study).number == fast_old  # type: ignore[union-attr]
    assert best_confirmed(study, old["group"]).number == fast_old  # type: ignore[union-attr]
    found = best_confirmed(study, new["group"])
    assert found is not None and found.number == reference_new and found.beaten_by(30.0)
    confirmed_new = _trial(study, 40.0, confirmation=_CONFIRMED, machine=new)
    assert best_confirmed(study, new["group"]).number == confirmed_new  # type: ignore[union-attr]
