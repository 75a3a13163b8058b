"""The recommendation under the held-out confirmation: the best confirmed trial, and the lines
that say which faster trial failed its confirmation and what the recommendation's error is."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import optuna
from study_factory import build_study

from autotune.report.confirmation import confirmation_json
from autotune.report.text import best_text
from autotune.study.results.select import recommend

HOLDOUT = {"items": 600, "digest": "0123456789abcdef"}


def verdict(decision: str, n_items: int) -> dict[str, Any]:
    return {
        "decision": decision, "index": 1, "error": 0.0608, "n_items": n_items,
        "holdout_items": 600, "holdout_digest": HOLDOUT["digest"], "mean_diff": 0.0,
        "ci_low": -0.019,
    }  # fmt: skip


def confirmed_study(tmp_path: Path, attrs: dict[int, dict[str, Any]]) -> optuna.Study:
    """The factory's study (trial 2 the fastest feasible, trial 5 the next) with a held-out
    slice and the given confirmations, copied trial by trial into a new study."""
    storage, name = build_study(tmp_path)
    built = optuna.load_study(study_name=name, storage=storage)
    study = optuna.create_study(study_name="confirmed", directions=built.directions)
    for key, value in built.user_attrs.items():
        study.set_user_attr(key, value)
    study.set_user_attr("confirmation_holdout", HOLDOUT)
    study.set_user_attr("space", {"constraints": {"accuracy": {"confidence": 0.9}}})
    for trial in built.get_trials():
        copied = copy.deepcopy(trial)
        if trial.number in attrs:
            copied.user_attrs["confirmation"] = attrs[trial.number]
        study.add_trial(copied)
    return study


def test_the_fastest_trial_unconfirmed_is_passed_over_and_said_so(tmp_path: Path) -> None:
    study = confirmed_study(
        tmp_path, {2: verdict("not confirmed", 600), 5: verdict("confirmed", 212)}
    )
    rec = recommend(study)
    assert rec.trial.number == 5
    assert rec.error_bound is not None and abs(rec.error_bound - 0.1) < 1e-12
    shown = confirmation_json(rec)
    assert shown["confirmed_by"]["items"] == 212
    assert shown["holdout"] == HOLDOUT
    assert [row["trial"] for row in shown["not_confirmed"]] == [2]
    text = best_text(study)
    assert "trial 2 failed its confirmation on 600 of the 600 held-out items" in text
    assert "trial 5 recommended" in text
    assert "confirmed on 212 of the 600 held-out items" in text


def test_without_a_confirmed_trial_the_reference_itself_is_recommended(tmp_path: Path) -> None:
    # The factory's reference is deployable, and it loses nothing to itself.
    study = confirmed_study(tmp_path, {2: verdict("not confirmed", 600)})
    rec = recommend(study)
    assert rec.trial.number == 0 and rec.error_bound is not None
    text = best_text(study)
    assert "accuracy: the reference itself, which loses nothing to itself" in text
    assert "trial 2 failed its confirmation on 600 of the 600 held-out items" in text
    assert "trial 5 answered none of the held-out items" in text


def test_a_study_without_a_holdout_recommends_as_before(tmp_path: Path) -> None:
    storage, name = build_study(tmp_path)
    study = optuna.load_study(study_name=name, storage=storage)
    rec = recommend(study)
    assert rec.trial.number == 2 and rec.error_bound is None and rec.holdout is None
    assert "no items held out to confirm the recommendation" in best_text(study)
