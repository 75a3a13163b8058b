"""What a screened trial is told: answer these items first, stop when already under the floor.

Built from the reference's answers (autotune.accuracy.reuse.screening_request) and carried in a
measure plan to the engine's worker, which judges the first answers with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:
    from autotune.evalset.dataset import EvalSet


class ScreeningRequest(BaseModel):
    """Answer `ids` first and stop early when already worse than the floor with confidence."""

    ids: list[str]
    reference_scores: dict[str, float]
    reference_passed: dict[str, bool]
    max_drop: float
    confidence: float


def hopeless(evalset: EvalSet, predictions: dict[str, str], screening: ScreeningRequest) -> bool:
    """True when even the optimistic end of the paired interval on the screened items misses
    the floor: every engine's screening phase asks this (the in-process worker, the server
    passes)."""
    from autotune.accuracy.paired import compare
    from autotune.accuracy.scoring import score_predictions

    report = score_predictions(evalset, predictions)
    paired = compare(
        report.item_scores,
        screening.reference_scores,
        candidate_passed=report.item_passed,
        reference_passed=screening.reference_passed,
        confidence=screening.confidence,
    )
    return paired.ci_high < -screening.max_drop
