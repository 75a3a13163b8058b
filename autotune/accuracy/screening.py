"""What a screened trial is told: answer these items first, stop when already under the floor.

Built from the reference's answers (autotune.accuracy.reuse.screening_request) and carried in a
measure plan to the engine's worker, which judges the first answers with it.
"""

from __future__ import annotations

from pydantic import BaseModel


class ScreeningRequest(BaseModel):
    """Answer `ids` first and stop early when already worse than the floor with confidence."""

    ids: list[str]
    reference_scores: dict[str, float]
    reference_passed: dict[str, bool]
    max_drop: float
    confidence: float
