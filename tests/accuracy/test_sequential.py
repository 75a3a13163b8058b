"""The sequential accuracy floor (autotune.accuracy.sequential): its verdicts, its error rate
over all its looks, its stages and its item order."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from autotune.accuracy.sequential import (
    items_needed_to_pass,
    items_to_decide,
    look,
    planted_diffs,
    stage_sizes,
)
from autotune.accuracy.staged import FloorRequest
from autotune.evalset.dataset import load_evalset


def test_a_candidate_that_repeats_the_reference_passes_after_about_log_alpha_over_margin() -> None:
    # No answer differs: the floor can only be sure after enough items that a true drop of
    # 0.05 would have shown one; no test can pass it on 10 items, every test by about 100.
    assert look([0.0] * 10, margin=-0.05, confidence=0.95).decision == "undecided"
    decided = look([0.0] * 120, margin=-0.05, confidence=0.95)
    assert decided.decision == "feasible"
    assert decided.ci_low > -0.05 and decided.ci_high >= 0.0
    verdict, n = items_to_decide([0.0] * 1000, margin=-0.05, confidence=0.95)
    assert verdict == "feasible" and math.log(20) / 0.05 / 2 < n < 2 * math.log(20) / 0.05


def test_a_large_drop_is_shown_in_a_few_items_and_its_interval_lies_below_the_margin() -> None:
    diffs = [-1.0, 0.0, -1.0, -1.0, 0.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.0]
    verdict = look(diffs, margin=-0.05, confidence=0.95)
    assert verdict.decision == "infeasible"
    assert verdict.ci_high < -0.05 <= 0.0
    assert verdict.mean_diff == pytest.approx(sum(diffs) / len(diffs))


def test_an_absolute_floor_judges_the_scores_themselves() -> None:
    request = FloorRequest(
        order=[f"i{k}" for k in range(300)],
        stages=[300],
        margin=0.5,
        confidence=0.9,
        reference_scores=None,
    )
    good = request.judge({f"i{k}": 1.0 if k % 10 else 0.0 for k in range(300)}, with_interval=True)
    bad = request.judge(
        {f"i{k}": 1.0 if k % 10 == 0 else 0.0 for k in range(300)}, with_interval=True
    )
    assert (good.decision, bad.decision) == ("feasible", "infeasible")
    assert good.ci_low > 0.5 > bad.ci_high


@pytest.mark.parametrize(("drop", "discordance"), [(0.02, 0.02), (0.02, 0.10), (0.05, 0.10)])
def test_a_candidate_at_or_past_the_margin_is_accepted_no_more_often_than_stated(
    drop: float, discordance: float
) -> None:
    # The confidence holds over every look: a floor looking after every item (the most
    # looks any stage plan makes) accepts a candidate that truly lost max_drop at most
    # 1 - confidence of the time. 300 draws: the binomial margin over 10% is about 5 points.
    rng = np.random.default_rng(7)
    diffs = np.stack(
        [planted_diffs(rng, 3000, drop=drop, discordance=discordance) for _ in range(300)], axis=1
    )
    verdicts, _ = items_to_decide(diffs, margin=-0.02, confidence=0.9)
    assert np.mean(verdicts == "feasible") <= 0.10 + 3 * math.sqrt(0.1 * 0.9 / 300)


def test_a_look_at_each_stage_decides_as_a_look_at_every_item_does() -> None:
    rng = np.random.default_rng(3)
    diffs = planted_diffs(rng, 2000, drop=0.0, discordance=0.05)
    verdict, n = items_to_decide(diffs, margin=-0.02, confidence=0.9)
    stages = stage_sizes(2000, first=20, batch=8)
    seen = next(
        s for s in stages if look(diffs[:s], margin=-0.02, confidence=0.9).decision != "undecided"
    )
    assert look(diffs[:seen], margin=-0.02, confidence=0.9).decision == verdict
    assert n <= seen  # the stage that decides is the first that holds the deciding item
    assert seen == next(s for s in stages if s >= n)


def test_more_disagreement_needs_more_items() -> None:
    needs = [
        items_needed_to_pass(max_drop=0.05, confidence=0.9, discordance=d, draws=60, cap=4000)[0]
        for d in (0.0, 0.05, 0.2)
    ]
    assert needs[0] < needs[1] < needs[2]


def test_stages_grow_by_whole_batches_and_end_with_the_pool() -> None:
    stages = stage_sizes(240, first=20, batch=8)
    assert stages[0] == 24 and stages[-1] == 240
    assert all(s % 8 == 0 for s in stages)
    assert all(b > a for a, b in itertools.pairwise(stages))
    assert stage_sizes(10, first=20) == [10]


def test_every_prefix_of_the_decision_order_holds_each_category_in_its_share() -> None:
    evalset = load_evalset("smoke")  # 192 text lines, 48 shape strips: 4 to 1
    order = evalset.decision_order()
    assert sorted(order) == sorted(item.id for item in evalset.items)
    assert order == evalset.decision_order()  # fixed: every trial answers the same items first
    category = {item.id: item.category for item in evalset.items}
    for n in (20, 40, 100):
        shares = Counter(category[i] for i in order[:n])
        assert abs(shares["shapes"] - n / 5) <= 1
    # Shuffled within each category: not file order.
    text_lines = [i for i in order if category[i] == "text_line"]
    assert text_lines != sorted(text_lines)
