"""Paired comparison of a candidate with the reference on the same evaluation items.

With ~150 pass/fail items near 80% accuracy the standard error of one accuracy is about three
points, so a floor closer than that to the reference cannot be judged from two point estimates.
Both trials answer the same items, so the paired differences carry far less noise: we report
their mean with a confidence interval (the sequential floor's confidence sequence, or a
bootstrap interval over a fixed set), and McNemar's exact test on the items where exactly one
of the two passed.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.accuracy.staged import FloorRequest

BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class PairedComparison:
    n_items: int
    accuracy_diff: float  # candidate minus reference, mean over shared items
    ci_low: float
    ci_high: float
    confidence: float
    only_candidate_passed: int
    only_reference_passed: int
    mcnemar_p: float
    test: str = "bootstrap"  # or "sequential": a confidence sequence (accuracy.sequential)
    # sequential only: "feasible", "infeasible" or "undecided" (the set ran out first)
    decision: str | None = None

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the two discordant counts."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def bootstrap_interval(
    diffs: list[float], *, confidence: float, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `diffs` (fixed seed: repeatable)."""
    if not diffs:
        return (math.nan, math.nan)
    if all(d == diffs[0] for d in diffs):
        return (diffs[0], diffs[0])
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(BOOTSTRAP_RESAMPLES))
    alpha = (1 - confidence) / 2
    low = means[math.floor(alpha * (BOOTSTRAP_RESAMPLES - 1))]
    high = means[math.ceil((1 - alpha) * (BOOTSTRAP_RESAMPLES - 1))]
    return (low, high)


def compare(
    candidate_scores: dict[str, float],
    reference_scores: dict[str, float],
    *,
    candidate_passed: dict[str, bool],
    reference_passed: dict[str, bool],
    confidence: float = 0.95,
    sequence: FloorRequest | None = None,
) -> PairedComparison:
    """Compare on the items both answered: a bootstrap interval, or with `sequence` the
    sequential floor's confidence sequence and verdict over the items in its order."""
    shared = sorted(set(candidate_scores) & set(reference_scores))
    diffs = [candidate_scores[i] - reference_scores[i] for i in shared]
    only_candidate = sum(1 for i in shared if candidate_passed[i] and not reference_passed[i])
    only_reference = sum(1 for i in shared if reference_passed[i] and not candidate_passed[i])
    if sequence is None:
        low, high = bootstrap_interval(diffs, confidence=confidence)
        test, decision = "bootstrap", None
    else:
        verdict = sequence.judge(candidate_scores, with_interval=True)
        low, high, confidence = verdict.ci_low, verdict.ci_high, verdict.confidence
        test, decision = "sequential", verdict.decision
    return PairedComparison(
        n_items=len(shared),
        accuracy_diff=sum(diffs) / len(diffs) if diffs else math.nan,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        only_candidate_passed=only_candidate,
        only_reference_passed=only_reference,
        mcnemar_p=mcnemar_exact_p(only_candidate, only_reference),
        test=test,
        decision=decision,
    )
