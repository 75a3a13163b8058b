"""What `best`, `best --json` and the report say of the recommendation's own error: the
held-out confirmation that bounds it (autotune.accuracy.confirm), or why there is none."""

from __future__ import annotations

from typing import Any

from autotune.records.parts import Confirmed
from autotune.records.stored import TrialRecord
from autotune.study.results.select import Recommendation


def confirmation_json(rec: Recommendation) -> dict[str, Any]:
    """The recommendation's error bound, the verdict and items that confirmed it, the study's
    held-out slice, and the faster trials the floor passed that were not confirmed."""
    verdict = rec.confirmation or Confirmed()
    return {
        "error_bound": rec.error_bound,
        "reference_itself": TrialRecord.of(rec.trial).is_reference,
        "confirmed_by": None if verdict.decision != "confirmed" else verdict.shown(),
        "holdout": rec.holdout,
        "not_confirmed": [{"trial": t.number, "reason": why} for t, why in rec.passed_over],
    }


# With dummy weights no verdict exists: the accuracy pass ran for its time (accuracy.timed).
DUMMY_LINE = (
    "accuracy: not judged (dummy weights: the accuracy pass was timed, not judged), so the "
    "recommendation's error is not judged either"
)


def confirmation_lines(rec: Recommendation, *, dummy_weights: bool = False) -> list[str]:
    """The recommendation's accuracy guarantee in words, then each faster trial passed over;
    with `dummy_weights` (the study's), that no verdict exists to state an error of."""
    if not rec.feasible:
        return []
    if dummy_weights:
        return [DUMMY_LINE]
    if rec.holdout is None:
        return [
            "accuracy: no items held out to confirm the recommendation (the set has no room, or "
            "constraints.accuracy.confirmation is off): each floor verdict has its error, the "
            "recommendation none of its own"
        ]
    verdict = rec.confirmation or Confirmed()
    if rec.error_bound is None:
        lines = [
            "accuracy: NOT confirmed on the held-out items, so no error bound: no trial the floor "
            "passed was confirmed, and this is the fastest of them"
        ]
    elif TrialRecord.of(rec.trial).is_reference:
        lines = ["accuracy: the reference itself, which loses nothing to itself"]
    else:
        lines = [
            f"accuracy: confirmed on {verdict.n_items} of the {verdict.holdout_items}"
            f" held-out items (slice {verdict.holdout_digest}, level j = {verdict.index}, "
            f"at error {verdict.error or 0:.3g}): it "
            f"loses max_drop or more with probability at most {rec.error_bound:.2g}, whatever "
            "the number of trials"
        ]
    return lines + [f"{why}; trial {rec.trial.number} recommended" for _, why in rec.passed_over]
