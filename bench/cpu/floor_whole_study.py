"""How often a whole study recommends a configuration that loses max_drop or more.

Planted studies: k configurations with distinct answers, their true drops spread around the
margin (half of them exactly at it, the rest at 0, below and above), the lossier the faster.
Each arrives in a random order and answers the search part of the pool until the floor
decides (autotune.accuracy.sequential, at the space's confidence). The j-th one the floor
passes (in arrival order) is tested on the held-out slice at level(alpha, j)
(autotune.accuracy.confirm), but only where it is faster than the fastest confirmed so far:
a slower one could never be recommended. The recommendation is the fastest confirmed one,
the same as when every configuration the floor passed is tested. Both are the study's own
code; the "without confirmation" column is the rule it replaces (the fastest the floor
passed, on the whole pool).

Answers are drawn independent (each configuration its own draws) or nested (half of each
configuration's draws from one latent difficulty per item, shared by the study: a lossier
configuration tends to miss the items a less lossy one misses, so tests on the shared
held-out slice move together, the case the union bound must cover).

Usage (from the repository root)::

    nice python bench/cpu/floor_error_rates.py --whole-study --seeds 500 --check \
        --out bench/results --name floor-whole-study-2026-12-07-confirm-when-faster
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from autotune.accuracy.confirm import holdout_size, level
from autotune.accuracy.sequential import items_to_decide
from autotune.space.settings import AccuracyConstraint

KS = (1, 5, 10, 20)
# Drops as shares of max_drop, in the order configurations are made (half at the margin).
DROP_SHARES = (1.0, 0.0, 1.0, 0.5, 1.0, 1.5, 1.0, 0.75, 1.0, 2.0)
# Nested answers: the share of each configuration's draws taken from the study's shared
# latent difficulty (the rest its own), so distinct configurations still answer distinctly.
SHARED = 0.5


@dataclass(frozen=True)
class StudySetting:
    name: str
    pool: int
    max_drop: float
    confidence: float
    identical_answers_only: bool
    base_discordance: float  # a configuration's discordance is this plus its drop

    def floor(self) -> AccuracyConstraint:
        return AccuracyConstraint(
            max_drop=self.max_drop,
            confidence=self.confidence,
            identical_answers_only=self.identical_answers_only,
        )


STUDY_SETTINGS = {
    # search_spaces/default.yaml: ocr-caption-3k, max_drop 0.02, confidence 0.9
    "default": StudySetting("default", 3000, 0.02, 0.9, False, 0.05),
    # search_spaces/smoke.yaml: the 240-item smoke set, max_drop 0.05, confidence 0.95,
    # identical answers only (its set is too small to pass differing ones): a configuration
    # that loses nothing answers as the reference, one that loses misses only
    "smoke": StudySetting("smoke", 240, 0.05, 0.95, True, 0.0),
}


def planted_answers(
    rng: np.random.Generator, n: int, studies: int, drops: np.ndarray, *, base: float, nested: bool
) -> np.ndarray:
    """Paired differences (n items, studies, k configurations): configuration c loses
    drops[c] on average and answers unlike the reference on base + drops[c] of items. Nested:
    each draw is the study's shared one with probability SHARED, else the configuration's."""
    k = len(drops)
    discordance = base + drops
    loses = np.where(discordance > 0, (1 + drops / np.maximum(discordance, 1e-12)) / 2, 0.0)
    u, v = rng.random((n, studies, k)), rng.random((n, studies, k))
    if nested:
        shared = rng.random((n, studies, k)) < SHARED
        u = np.where(shared, rng.random((n, studies, 1)), u)
        v = np.where(shared, rng.random((n, studies, 1)), v)
    return np.where(u < discordance, np.where(v < loses, -1.0, 1.0), 0.0)


def whole_study(
    setting: StudySetting, k: int, studies: int, *, nested: bool = True, seed: int = 0
) -> dict[str, object]:
    """Planted studies of k configurations, run through the search floor and confirmation."""
    rng = np.random.default_rng([seed, k, setting.pool])
    floor = setting.floor()
    alpha = 1 - setting.confidence
    held = min(holdout_size(floor, setting.pool), setting.pool - 1)
    search = setting.pool - held
    drops = setting.max_drop * np.array([DROP_SHARES[c % len(DROP_SHARES)] for c in range(k)])
    diffs = planted_answers(
        rng, setting.pool, studies, drops, base=setting.base_discordance, nested=nested
    )
    margin = -setting.max_drop
    # The search floor on the search part, and the floor today on the whole pool, one
    # configuration at a time (all studies side by side).
    passed = np.zeros((studies, k), dtype=bool)
    passed_today = np.zeros((studies, k), dtype=bool)
    searched_items = np.zeros((studies, k))
    for c in range(k):
        searched, searched_items[:, c] = items_to_decide(
            diffs[:search, :, c], margin=margin, confidence=setting.confidence
        )
        today, _ = items_to_decide(diffs[:, :, c], margin=margin, confidence=setting.confidence)
        passed[:, c], passed_today[:, c] = searched == "feasible", today == "feasible"
    arrival = np.argsort(rng.random((studies, k)), axis=1)
    speed = drops + 1e-6 * rng.random((studies, k))  # the lossier, the faster
    # The j-th configuration the search floor passes, in arrival order, is tested at
    # level(alpha, j): j is fixed by the search alone (autotune.accuracy.confirm).
    index = np.zeros((studies, k), dtype=int)
    for s in range(studies):
        order = [c for c in arrival[s] if passed[s, c]]
        index[s, order] = np.arange(1, len(order) + 1)
    verdict = np.zeros((studies, k), dtype=bool)
    counts = np.zeros((studies, k))
    holdout = diffs[search:]
    for j in np.unique(index[index > 0]):
        s_idx, c_idx = np.nonzero(index == j)
        verdicts, needed = items_to_decide(
            holdout[:, s_idx, c_idx], margin=margin, confidence=1 - level(alpha, int(j))
        )
        verdict[s_idx, c_idx] = verdicts == "feasible"
        counts[s_idx, c_idx] = needed
    # A test runs only for one faster than the fastest confirmed before it (the reference,
    # slower than every candidate here, confirms none): its outcome is the one above.
    tested = np.zeros((studies, k), dtype=bool)
    for s in range(studies):
        best = -math.inf
        for c in arrival[s]:
            if index[s, c] > 0 and speed[s, c] > best:
                tested[s, c] = True
                best = speed[s, c] if verdict[s, c] else best
    confirmed = tested & verdict
    spent = counts * tested
    chosen = _fastest(confirmed, speed)
    chosen_today = _fastest(passed_today, speed)
    recommended = chosen >= 0
    bad = recommended & (drops[np.maximum(chosen, 0)] >= setting.max_drop)
    lossless = recommended & (drops[np.maximum(chosen, 0)] == 0.0)
    bad_today = (chosen_today >= 0) & (drops[np.maximum(chosen_today, 0)] >= setting.max_drop)
    errors = int(bad.sum())
    low, high = stats.binomtest(errors, studies).proportion_ci(0.95, method="wilson")
    return {
        "setting": setting.name,
        "answers": "nested" if nested else "independent",
        "k": k,
        "studies": studies,
        "holdout_items": held,
        "search_items": search,
        "stated_error": alpha,
        "recommended_loses_max_drop": errors / studies,
        "recommended_loses_max_drop_ci95": [low, high],
        "without_confirmation_loses_max_drop": float(bad_today.mean()),
        "recommended_loses_nothing": float(lossless.mean()),
        "nothing_recommended": float((~recommended).mean()),
        "confirmations_per_study": float(tested.sum(axis=1).mean()),
        "passed_not_tested_per_study": float(((index > 0) & ~tested).sum(axis=1).mean()),
        "search_items_answered_per_study": float(searched_items.sum(axis=1).mean()),
        "holdout_items_answered_per_study": float(spent.sum(axis=1).mean()),
        "holdout_items_every_one_tested": float(counts.sum(axis=1).mean()),
        # The share of studies recommending what testing every passed one would: all of them.
        "same_as_every_one_tested": float((chosen == _fastest(verdict, speed)).mean()),
    }


def _fastest(eligible: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """Per study, the fastest eligible configuration (-1: none)."""
    ranked = np.where(eligible, speed, -math.inf)
    return np.where(eligible.any(axis=1), ranked.argmax(axis=1), -1)


def check(cell: dict[str, object]) -> str | None:
    """A failure line when the recommendation loses max_drop more often than stated (the
    lower end of its 95% binomial interval above 1 - confidence)."""
    low = cell["recommended_loses_max_drop_ci95"][0]  # type: ignore[index]
    if float(low) > float(cell["stated_error"]):  # type: ignore[arg-type]
        return (
            f"{cell['setting']} k={cell['k']} ({cell['answers']}): the recommendation lost "
            f"max_drop in {cell['recommended_loses_max_drop']:.3f} of studies, over "
            f"{cell['stated_error']:g}"
        )
    return None


def markdown_rows(cells: list[dict[str, object]]) -> list[str]:
    lines = [
        "| setting | answers | k | held out / search items | loses >= max_drop (95% CI) | "
        "without confirmation | loses nothing | none recommended | confirmations | "
        "held-out items answered (every passed one tested) | passed, not tested | "
        "search items answered |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        low, high = c["recommended_loses_max_drop_ci95"]  # type: ignore[misc]
        lines.append(
            f"| {c['setting']} | {c['answers']} | {c['k']} | {c['holdout_items']} / "
            f"{c['search_items']} | {c['recommended_loses_max_drop']:.3f} ({low:.3f}-{high:.3f})"
            f" | {c['without_confirmation_loses_max_drop']:.3f} | "
            f"{c['recommended_loses_nothing']:.3f} | {c['nothing_recommended']:.3f} | "
            f"{c['confirmations_per_study']:.2f} | {c['holdout_items_answered_per_study']:,.0f} "
            f"({c['holdout_items_every_one_tested']:,.0f}) | "
            f"{c['passed_not_tested_per_study']:.2f} | "
            f"{c['search_items_answered_per_study']:,.0f} |"
        )
    return lines
