"""What an evaluation set can decide under the sequential floor: one source for every reader.

A study's warning and `autotune evalset needs` both state, for a set of n items, the largest
share of differing answers at which a candidate as accurate as the reference passes 9 times
in 10. They read it here, from the same simulation (`items_needed_to_pass`, the table `needs`
prints) and on the same items: the search floor's, the set less the slice held out to confirm
the recommendation, since the floor never looks at that slice. Two readers computing it apart
told a user two different figures for one set.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

# The shares of differing answers a set is judged at: the rows of `autotune evalset needs`.
DISCORDANCES = (0.0, 0.02, 0.05, 0.10, 0.20)
SIMULATED_ITEMS = 12_000  # the longest sequence simulated; past it a row reads "over 12,000"


@cache
def items_to_pass(max_drop: float, confidence: float, discordance: float) -> tuple[float, float]:
    """The median and the 90th percentile of the items the sequential floor spends to pass a
    candidate exactly as accurate as the reference (cached: a study and `needs` ask often)."""
    from autotune.accuracy.sequential import items_needed_to_pass

    median, p90, _ = items_needed_to_pass(
        max_drop=max_drop, confidence=confidence, discordance=discordance, cap=SIMULATED_ITEMS
    )
    return median, p90


@dataclass(frozen=True)
class SetReach:
    """What `items` decide at one floor: `reach` is the largest of DISCORDANCES at which the
    search items pass such a candidate 9 times in 10 (None: not even identical answers)."""

    items: int
    held_out: int  # the confirmation's slice; 0 where it is off or does not fit in the set
    max_drop: float
    confidence: float
    reach: float | None

    @property
    def search_items(self) -> int:
        return self.items - self.held_out

    def sentence(self) -> str:
        """The one sentence every reader prints."""
        if self.reach is None:
            can = "no candidate at all, not even one answering word for word as the reference"
        elif self.reach == 0.0:
            can = "a candidate as accurate as the reference only where their answers agree on "
            can += "every item"
        else:
            can = "a candidate as accurate as the reference where their answers differ on up "
            can += f"to {self.reach:.0%} of items"
        counted = (
            f"{self.items:,} items, {self.held_out:,} of them held out to confirm the "
            f"recommendation: the other {self.search_items:,} let"
            if self.held_out
            else f"{self.items:,} items let"
        )
        return (
            f"{counted} the sequential floor pass {can} (9 times in 10, max_drop "
            f"{self.max_drop:g}, confidence {self.confidence:g})"
        )

    def command(self, evalset: str) -> str:
        """The `evalset needs` command that prints this sentence, with its table."""
        return (
            f"autotune evalset needs --max-drop {self.max_drop:g} --confidence "
            f"{self.confidence:g} --held-out {self.held_out} --evalset {evalset}"
        )


def set_reach(items: int, *, max_drop: float, confidence: float, held_out: int) -> SetReach:
    """What `items` decide when `held_out` of them confirm the recommendation; a slice that
    leaves no search items is no slice (autotune.accuracy.confirm.Holdout holds out none)."""
    held = held_out if 0 < held_out < items else 0
    reach = None
    for discordance in DISCORDANCES:
        if items_to_pass(max_drop, confidence, discordance)[1] > items - held:
            break
        reach = discordance
    return SetReach(items, held, max_drop, confidence, reach)


def needs_rows(max_drop: float, confidence: float) -> list[dict[str, float]]:
    """The table of `autotune evalset needs`: at each share of differing answers, the median
    items spent and the items that pass such a candidate 9 times in 10."""
    rows = []
    for discordance in DISCORDANCES:
        median, p90 = items_to_pass(max_drop, confidence, discordance)
        rows.append({"discordance": discordance, "median_items": median, "items_for_90pct": p90})
    return rows
