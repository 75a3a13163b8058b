"""A trial judged against the reference: the decision it records, and the level its
confirmation is tested at."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import create_trial
from small_space import small_space

from autotune.accuracy.scoring import AccuracyReport
from autotune.evalset.dataset import load_evalset
from autotune.space import load_space
from autotune.study.run.verdicts import IDENTICAL, floor_passed_rank, judge_paired


def test_identical_answers_record_that_as_their_decision(tmp_path: Path) -> None:
    space = load_space(str(small_space(tmp_path)))
    evalset = load_evalset(space.resolve_path(space.evalset))
    ids = [item.id for item in evalset.items]
    scores = {i: float(n % 2) for n, i in enumerate(ids)}
    passed = {i: bool(v) for i, v in scores.items()}
    report = AccuracyReport(0.5, {}, dict(scores), dict(passed))
    reference = AccuracyReport(0.5, {}, dict(scores), dict(passed))  # the reference's answers
    # 8 items: the sequence cannot show anything, so the floor alone is undecided.
    alone = judge_paired(report, reference, space, evalset, same_answers=False)
    assert alone.decision == "undecided"
    same = judge_paired(report, reference, space, evalset, same_answers=True)
    assert same.decision == IDENTICAL == "identical answers"
    assert same.to_dict()["decision"] == IDENTICAL


def _passed_trial(study: optuna.Study, key: str, decision: str, **attrs: object) -> None:
    paired = {"decision": decision, "test": "sequential"}
    attrs = {"output_key": key, "paired_vs_reference": paired, **attrs}
    study.add_trial(create_trial(values=[1.0], user_attrs=attrs))


def test_a_confirmations_level_is_its_answers_rank_among_those_the_floor_passed() -> None:
    study = optuna.create_study(direction="maximize")
    _passed_trial(study, "ref", "feasible", is_reference=True)  # the reference ranks not
    assert floor_passed_rank(study, "a") == 1
    _passed_trial(study, "a", "feasible", confirmation={"decision": "not confirmed"})
    _passed_trial(study, "b", "infeasible")  # the floor refused it
    # Passed, its confirmation skipped (slower): it still takes its rank, fixed by the search.
    _passed_trial(study, "c", IDENTICAL, confirmation_skipped={"confirmed_trial": 0})
    _passed_trial(study, "a", "feasible")  # the same answers again share their rank
    assert [floor_passed_rank(study, k) for k in ("a", "c", "b", "d")] == [1, 2, 3, 3]
