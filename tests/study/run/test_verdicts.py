"""A trial judged against the reference: the decision it records."""

from __future__ import annotations

from pathlib import Path

from small_space import small_space

from autotune.accuracy.scoring import AccuracyReport
from autotune.evalset.dataset import load_evalset
from autotune.space import load_space
from autotune.study.run.verdicts import IDENTICAL, judge_paired


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
