"""Paired comparison with the reference: bootstrap interval and McNemar's exact test."""

from __future__ import annotations

import math

import pytest

from autotune.accuracy.paired import bootstrap_interval, compare, mcnemar_exact_p


def test_mcnemar_exact_matches_binomial_values() -> None:
    assert mcnemar_exact_p(0, 0) == 1.0
    # 10 discordant pairs all one way: p = 2 * 0.5**10
    assert mcnemar_exact_p(0, 10) == pytest.approx(2 * 0.5**10)
    # Balanced discordance is no evidence at all.
    assert mcnemar_exact_p(5, 5) == 1.0
    assert mcnemar_exact_p(2, 8) == pytest.approx(0.109375)


def test_identical_answers_give_a_zero_width_interval() -> None:
    assert bootstrap_interval([0.0] * 30, confidence=0.95) == (0.0, 0.0)


def test_interval_contains_the_mean_and_shrinks_with_more_items() -> None:
    small = [-1.0, 0.0, 0.0, 0.0] * 5
    large = small * 10
    low_s, high_s = bootstrap_interval(small, confidence=0.95)
    low_l, high_l = bootstrap_interval(large, confidence=0.95)
    assert low_s < -0.25 < high_s
    assert low_l < -0.25 < high_l
    assert (high_l - low_l) < (high_s - low_s)


def test_compare_counts_discordant_items() -> None:
    ref = {f"i{k}": 1.0 for k in range(20)}
    cand = dict(ref)
    for k in range(6):
        cand[f"i{k}"] = 0.0
    result = compare(
        cand,
        ref,
        candidate_passed={k: v >= 1 for k, v in cand.items()},
        reference_passed={k: v >= 1 for k, v in ref.items()},
    )
    assert result.n_items == 20
    assert result.accuracy_diff == pytest.approx(-0.3)
    assert result.only_reference_passed == 6 and result.only_candidate_passed == 0
    assert result.ci_high < 0  # confidently worse
    assert result.mcnemar_p == pytest.approx(2 * 0.5**6)
    assert not math.isnan(result.ci_low)
