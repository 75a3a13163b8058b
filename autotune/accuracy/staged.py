"""What a trial's accuracy pass is told: the items in decision order, the looks, the floor.

Built in the study process (autotune.accuracy.reuse.floor_request) from the reference's
answers and carried in a measure plan to the engine, which answers a stage at a time and asks
`look_at_answers` after each whether the floor has decided (autotune.engines.phases). The
first stage can come before the load test (screening): a trial already shown to lose more
than the floor allows stops there. Every look belongs to one confidence sequence
(autotune.accuracy.sequential), so looking early costs no confidence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from autotune.accuracy.sequential import FloorLook, look, paired_diffs

if TYPE_CHECKING:
    from autotune.evalset.dataset import EvalSet


class FloorRequest(BaseModel):
    """Answer `order` a stage at a time; stop when the floor has decided."""

    order: list[str] = Field(description="Every item the floor may ask for, in decision order.")
    stages: list[int] = Field(description="Items seen at each look; the last is len(order).")
    screening_items: int = Field(0, description="Items answered before the load test; 0: none.")
    # None: an absolute floor, which judges the candidate's own scores against `margin`.
    reference_scores: dict[str, float] | None = None
    margin: float = Field(description="-max_drop (relative) or the lowest accuracy (absolute).")
    confidence: float

    def judge(self, scores: dict[str, float], *, with_interval: bool = False) -> FloorLook:
        """The verdict on the scores of the answered items (the order's prefix); with
        `with_interval` also both ends of the confidence sequence, for the trial's record (the
        engine's looks need the verdict alone)."""
        if self.reference_scores is None:
            values = [scores[i] for i in self.order if i in scores]
            return look(
                values,
                margin=self.margin,
                confidence=self.confidence,
                low=0.0,
                high=1.0,
                expected=None,
                with_interval=with_interval,
            )
        diffs = paired_diffs(self.order, scores, self.reference_scores)
        # A relative floor knows what a passing candidate looks like: one that loses nothing.
        return look(
            diffs, margin=self.margin, confidence=self.confidence, with_interval=with_interval
        )


def look_at_answers(
    evalset: EvalSet, predictions: dict[str, str], request: FloorRequest
) -> FloorLook:
    """Score the answers so far and ask the floor: every engine's accuracy pass calls this
    (the in-process worker, the server passes), screening included."""
    from autotune.accuracy.scoring import score_predictions

    return request.judge(score_predictions(evalset, predictions).item_scores)
