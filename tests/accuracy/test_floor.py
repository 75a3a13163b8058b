"""A floor that explains itself: the reasons of an infeasible trial, and too-small sets."""

from __future__ import annotations

import pytest

from autotune.accuracy.floor import floor_warning, infeasible_because, items_needed
from autotune.records.stored import TrialRecord
from autotune.space import Constraints


def test_items_needed_grows_with_a_tighter_margin_and_is_largest_at_half() -> None:
    assert items_needed(0.5, 0.05, 0.95) > items_needed(0.9, 0.05, 0.95)
    assert items_needed(0.9, 0.02, 0.95) > items_needed(0.9, 0.05, 0.95)
    # z = 1.96, d = 2 * 0.5 * 0.5: (1.96 / 0.05)^2 * 0.5 = 768.3
    assert items_needed(0.5, 0.05, 0.95) == 769
    assert items_needed(1.0, 0.05, 0.95) == 1  # nothing can differ: any set will do


def test_small_sets_are_warned_about_with_what_would_do() -> None:
    constraints = Constraints.model_validate({"accuracy": {"max_drop": 0.05, "test": "bootstrap"}})
    warning = floor_warning(32, 0.188, constraints, evalset="mine")
    assert warning is not None
    assert "32 items" in warning and "about 470 items" in warning and "test: point" in warning
    assert floor_warning(500, 0.188, constraints, evalset="mine") is None
    point = Constraints.model_validate({"accuracy": {"max_drop": 0.05, "test": "point"}})
    assert floor_warning(32, 0.188, point, evalset="mine") is None


def test_the_sequential_floor_warns_where_its_set_cannot_pass_a_candidate_that_differs() -> None:
    constraints = Constraints.model_validate({"accuracy": {"max_drop": 0.02, "confidence": 0.9}})
    warning = floor_warning(164, 0.8, constraints, evalset="ocr-caption")  # its 164 items
    assert warning is not None
    assert "164 items" in warning and "word for word" in warning
    # The command that prints the same sentence (tests/accuracy/test_reach.py runs it).
    needs = "needs --max-drop 0.02 --confidence 0.9 --held-out 0 --evalset ocr-caption`"
    assert f"`autotune evalset {needs}" in warning
    # Counted on the search items: the default pool's 3,000 less the slice, sized to leave
    # the search what passes 5% (no warning); a space that holds out 1,625 itself leaves 1,375,
    # which pass 2% only (over all 3,000, 10% would pass, and no warning was printed).
    assert floor_warning(3000, 0.8, constraints, evalset="pool") is None
    held = Constraints.model_validate(
        {"accuracy": {"max_drop": 0.02, "confidence": 0.9, "confirmation": {"items": 1625}}}
    )
    pool = floor_warning(3000, 0.8, held, evalset="pool")
    assert pool is not None and "the other 1,375 let" in pool and "up to 2% of items" in pool
    assert floor_warning(5000, 0.8, held, evalset="pool") is None


@pytest.mark.parametrize(
    ("decision", "words"),
    [
        ("infeasible", "on the same 120 items; the confidence sequence (each end a one-sided "
         "90% bound, both ends together 80%) [-0.300, -0.100] shows a drop of more than 0.05"),
        ("undecided", "undecided after 120 items: accuracy 0.700 vs reference 0.700; the "
         "confidence sequence (each end a one-sided 90% bound, both ends together 80%) "
         "[-0.060, +0.050] neither excludes nor shows a drop of 0.05"),
    ],
)  # fmt: skip
def test_sequential_reasons_say_what_the_sequence_showed(decision: str, words: str) -> None:
    constraints = Constraints.model_validate({"accuracy": {"max_drop": 0.05, "confidence": 0.9}})
    low, high = (-0.3, -0.1) if decision == "infeasible" else (-0.06, 0.05)
    attrs = {
        "accuracy": 0.7,
        "constraints": {"accuracy": 0.01},
        "paired_vs_reference": {
            "accuracy_diff": 0.0,
            "ci_low": low,
            "ci_high": high,
            "confidence": 0.9,
            "n_items": 120,
            "test": "sequential",
            "decision": decision,
        },
    }
    (reason,) = infeasible_because(TrialRecord.from_attrs(attrs, number=0), constraints)
    assert words in reason


def test_reasons_name_the_figure_the_limit_and_the_interval() -> None:
    constraints = Constraints.model_validate(
        {
            "accuracy": {"max_drop": 0.05, "confidence": 0.9, "test": "bootstrap"},
            "memory_budget_mib": 4096,
        }
    )
    attrs = {
        "accuracy": 0.188,
        "peak_memory_mib": 5000.0,
        "constraints": {"accuracy": 0.044, "memory": 904.0, "latency": 0.0},
        "paired_vs_reference": {
            "accuracy_diff": 0.0,
            "ci_low": -0.094,
            "ci_high": 0.094,
            "confidence": 0.9,
            "n_items": 32,
        },
    }
    reasons = infeasible_because(TrialRecord.from_attrs(attrs, number=0), constraints)
    assert reasons == [
        "accuracy 0.188 vs reference 0.188; 90% two-sided interval of the paired difference "
        "[-0.094, +0.094] does not "
        "exclude a drop of 0.05 with 32 items",
        "peak memory 5,000 MiB is over the budget of 4,096 MiB",
    ]
    feasible = {**attrs, "constraints": {"accuracy": -0.01, "memory": -1.0, "latency": 0.0}}
    assert infeasible_because(TrialRecord.from_attrs(feasible, number=0), constraints) == []


@pytest.mark.parametrize("mode", ["absolute", "point"])
def test_other_floors_explain_themselves_too(mode: str) -> None:
    accuracy = {"mode": "absolute", "min": 0.5} if mode == "absolute" else {"test": "point"}
    constraints = Constraints.model_validate({"accuracy": accuracy})
    attrs = {
        "accuracy": 0.3,
        "constraints": {"accuracy": 0.2},
        "paired_vs_reference": {"accuracy_diff": -0.25},
    }
    (reason,) = infeasible_because(TrialRecord.from_attrs(attrs, number=0), constraints)
    assert ("under the floor 0.5" if mode == "absolute" else "0.250 under the reference") in reason
