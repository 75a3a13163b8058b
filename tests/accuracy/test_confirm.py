"""The held-out confirmation: its slice, its levels, its verdicts."""

from __future__ import annotations

import math

from autotune.accuracy.confirm import (
    Holdout,
    confirm,
    confirm_request,
    holdout_size,
    level,
    search_items,
)
from autotune.space.settings import AccuracyConstraint


def test_levels_sum_to_the_error() -> None:
    assert level(0.1, 1) == 6 * 0.1 / math.pi**2
    assert sum(level(0.1, j) for j in range(1, 100_000)) < 0.1
    assert level(0.1, 2) < level(0.1, 1)


def test_holdout_is_the_end_of_the_decision_order() -> None:
    order = [f"i{n}" for n in range(50)]
    held = Holdout.of(order, 10)
    assert held.ids == order[40:]
    assert held.search_order(order) == order[:40]
    assert Holdout.of(order, 10).digest == held.digest != Holdout.of(order, 11).digest
    assert Holdout.of(order, 50).ids == []  # no room left to search: nothing held out


def test_holdout_size_follows_the_floor() -> None:
    floor = AccuracyConstraint(max_drop=0.05, confidence=0.95)
    identical = AccuracyConstraint(max_drop=0.05, confidence=0.95, identical_answers_only=True)
    assert holdout_size(identical) < holdout_size(floor)
    # Identical answers need about log(1 / alpha_1) / max_drop items to be confirmed.
    assert 60 < holdout_size(identical) < 140
    explicit = AccuracyConstraint.model_validate({"confirmation": {"items": 64}})
    assert holdout_size(explicit) == 64
    off = AccuracyConstraint.model_validate({"confirmation": {"enabled": False}})
    assert holdout_size(off) == 0


def test_a_pool_too_small_for_both_gives_the_search_what_it_needs_first() -> None:
    """The default floor in its 3,000-item pool: the slice leaves the search the items that
    pass a candidate losing nothing at 5% discordance 9 times in 10, and keeps the rest (none
    where nothing is left); a pool with room for both gets both in full."""
    floor = AccuracyConstraint(max_drop=0.02, confidence=0.9)
    wanted = holdout_size(floor)
    search = search_items(max_drop=0.02, confidence=0.9, discordance=0.05)
    assert wanted + search > 3000  # the default pool cannot hold both in full
    assert holdout_size(floor, 3000) == 3000 - search
    assert holdout_size(floor, wanted + search + 10) == wanted
    assert holdout_size(floor, search + 10) == 10
    assert holdout_size(floor, search - 10) == 0
    explicit = AccuracyConstraint.model_validate({"confirmation": {"items": 64}})
    assert holdout_size(explicit, 100) == 64  # the space's own count stands


def test_confirm_passes_identical_answers_and_refuses_a_loss() -> None:
    floor = AccuracyConstraint(max_drop=0.05, confidence=0.95, identical_answers_only=True)
    order = [f"i{n}" for n in range(400)]
    held = Holdout.of(order, 200)
    request = confirm_request(floor, held, index=1, batch=8)
    assert request is not None and math.isclose(request.error, level(0.05, 1))
    reference = dict.fromkeys(order, 1.0)
    first = dict.fromkeys(held.ids[:120], 1.0)  # the engine's stages stop early
    same = confirm(request, first, reference)
    assert same.decision == "confirmed" and same.n_items == 120
    assert same.holdout_digest == held.digest and same.holdout_items == 200
    lossy = {i: 0.0 if n % 5 == 0 else 1.0 for n, i in enumerate(held.ids)}  # loses 0.2
    assert confirm(request, lossy, reference).decision == "not confirmed"
    # The same answers at a later confirmation's smaller error need more items.
    later = confirm_request(floor, held, index=5, batch=8)
    assert later is not None
    assert confirm(later, first, reference).decision == "not confirmed"
    assert confirm(later, dict.fromkeys(held.ids, 1.0), reference).decision == "confirmed"
