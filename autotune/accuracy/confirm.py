"""Confirming the recommendation on held-out items: an error for the study's answer itself.

Each floor verdict is wrong at most 1 - confidence of the time, but the study recommends the
fastest trial the floor passed, and the fastest are the lossiest. So a slice of the pool (the
last items of the decision order, every category in its share) is held out from the search
floor; the recommendation is the fastest confirmed trial, else the reference. A trial the
floor passes is confirmed only where faster than the best confirmed so far (the reference
counts where it can be recommended): a slower one could never be recommended.

The error stays under alpha = 1 - confidence: a confirmation is tested at alpha_j = 6 alpha /
(pi^2 j^2), and no two answer sets share a j, so P(some bad trial confirmed) <= sum_j alpha_j
<= alpha, whatever subset of tests runs. j is fixed by the search alone: with W workers
(--gpus), the trial's on worker w (from 0) is W (r - 1) + w + 1, r the rank of its answers
among those the floor passed on that worker, in completion order. Each worker's sequence is
serial, so two trials settling at once on two workers never share a j (a rank over the whole
study would: neither sees the other complete), with no lock Optuna's storage lacks; with one
worker j = r. The recommendation equals that of confirming every trial the floor passed: an
untested one is slower than one confirmed. bench/cpu/floor_error_rates.py --whole-study.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from autotune.accuracy.reach import items_to_pass
from autotune.accuracy.sequential import stage_sizes
from autotune.accuracy.staged import FloorRequest

if TYPE_CHECKING:
    from autotune.evalset.dataset import EvalSet
    from autotune.space import SearchSpace
    from autotune.space.settings import AccuracyConstraint

# The candidate the default held-out slice is sized for: it loses nothing, and answers unlike
# the reference on this share of items (0 where the space wants identical answers only).
SIZING_DISCORDANCE = 0.05
FIRST_LOOK_ITEMS = 20  # as the search floor's first stage (autotune.accuracy.reuse)
Verdict = Literal["confirmed", "not confirmed"]
HOLDOUT = "confirmation_holdout"  # the study attribute naming its held-out slice


def level(alpha: float, index: int) -> float:
    """The error the `index`-th confirmation (from 1) may spend: 6 alpha / (pi^2 j^2), whose
    sum over every j is alpha; later ones pay little more (log j) in items."""
    return 6 * alpha / (math.pi**2 * max(1, index) ** 2)


@cache
def holdout_items(*, max_drop: float, confidence: float, discordance: float) -> int:
    """Items a candidate that loses nothing, answering unlike the reference on `discordance`
    of items, needs to be confirmed 9 times in 10 at the study's first level."""
    alpha_1 = level(1 - confidence, 1)
    return math.ceil(items_to_pass(max_drop, 1 - alpha_1, discordance)[1])


def search_items(*, max_drop: float, confidence: float, discordance: float) -> int:
    """Items the search floor needs to pass that same candidate 9 times in 10 (the
    simulation `autotune evalset needs` and a study's warning read, cached there)."""
    return math.ceil(items_to_pass(max_drop, confidence, discordance)[1])


def holdout_size(floor: AccuracyConstraint, pool_items: int | None = None) -> int:
    """Items held out: the space's own count, else what a candidate that loses nothing needs
    to be confirmed 9 times in 10 at the first confirmation's error (0 with it off).

    The search comes first: in a pool of `pool_items` too small for both needs, the slice
    leaves the search floor what it needs and keeps the rest (none where nothing is left: a
    study then states that its recommendation is not confirmed)."""
    if not (floor.enabled and floor.mode == "relative" and floor.test == "sequential"):
        return 0
    if not floor.confirmation.enabled:
        return 0
    if floor.confirmation.items is not None:
        return floor.confirmation.items
    discordance = sizing_discordance(floor)
    wanted = holdout_items(
        max_drop=floor.max_drop, confidence=floor.confidence, discordance=discordance
    )
    if pool_items is None:
        return wanted
    search = search_items(
        max_drop=floor.max_drop, confidence=floor.confidence, discordance=discordance
    )
    return min(wanted, max(pool_items - search, 0))


def sizing_discordance(floor: AccuracyConstraint) -> float:
    """The discordance the slice is sized at: 0 where the space wants identical answers."""
    return 0.0 if floor.identical_answers_only else SIZING_DISCORDANCE


@dataclass(frozen=True)
class Holdout:
    """The held-out slice of a pool: its ids in decision order and a digest naming them."""

    ids: list[str]
    digest: str

    @classmethod
    def of(cls, order: list[str], items: int) -> Holdout:
        """The last `items` of the decision order (none where `items` leaves no search)."""
        ids = order[len(order) - items :] if 0 < items < len(order) else []
        return cls(ids, hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16])

    def search_order(self, order: list[str]) -> list[str]:
        """The decision order without the held-out items: what the search floor asks for."""
        held = set(self.ids)
        return [i for i in order if i not in held]

    def describe(self) -> dict[str, Any]:
        return {"items": len(self.ids), "digest": self.digest}


def study_holdout(space: SearchSpace, evalset: EvalSet) -> Holdout:
    """The study's held-out slice: deterministic from the set's decision order and the
    space's floor, so a resumed run holds out the same items."""
    order = evalset.decision_order()
    return Holdout.of(order, holdout_size(space.constraints.accuracy, len(order)))


def search_order(space: SearchSpace, evalset: EvalSet) -> list[str]:
    """The items the search floor may ask for, in decision order: all but the held-out."""
    order = evalset.decision_order()
    return study_holdout(space, evalset).search_order(order)


class ConfirmRequest(BaseModel):
    """How a trial's held-out answers are asked for and judged: a stage at a time, like the
    search floor (FloorRequest), at the error its place in the study may spend."""

    order: list[str] = Field(description="The held-out ids, in decision order.")
    stages: list[int] = Field(description="Items seen at each look; the last is len(order).")
    margin: float = Field(description="-max_drop.")
    index: int = Field(ge=1, description="Which confirmation of the study this is (from 1).")
    error: float = Field(gt=0, lt=1, description="The error it may spend: level(alpha, index).")
    digest: str = Field(description="Names the held-out slice (Holdout.digest).")

    def floor(self, reference_scores: dict[str, float]) -> FloorRequest:
        """The FloorRequest an engine answers the slice by (autotune.engines.phases)."""
        return FloorRequest(
            order=self.order,
            stages=self.stages,
            reference_scores={i: reference_scores[i] for i in self.order if i in reference_scores},
            margin=self.margin,
            confidence=1 - self.error,
        )


def confirm_request(
    floor: AccuracyConstraint, holdout: Holdout, *, index: int, batch: int = 1
) -> ConfirmRequest | None:
    """The `index`-th confirmation's request; None without a held-out slice."""
    if not holdout.ids:
        return None
    return ConfirmRequest(
        order=holdout.ids,
        stages=stage_sizes(len(holdout.ids), first=FIRST_LOOK_ITEMS, batch=batch),
        margin=-floor.max_drop,
        index=index,
        error=level(1 - floor.confidence, index),
        digest=holdout.digest,
    )


@dataclass(frozen=True)
class Confirmation:
    """A trial's verdict on the held-out items, as it records it."""

    decision: Verdict
    index: int
    error: float  # the most often such a verdict confirms a trial that loses max_drop or more
    n_items: int  # held-out items answered
    holdout_items: int
    holdout_digest: str
    mean_diff: float  # candidate minus reference, over the items answered
    ci_low: float  # one-sided lower bound at 1 - error, valid over all looks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def confirm(
    request: ConfirmRequest, scores: dict[str, float], reference_scores: dict[str, float]
) -> Confirmation:
    """The verdict on a trial's held-out answers: confirmed once the confidence sequence
    at 1 - error shows it loses less than max_drop; not confirmed otherwise (shown to lose
    more, or the slice ran out first)."""
    look = request.floor(reference_scores).judge(scores, with_interval=True)
    return Confirmation(
        decision="confirmed" if look.decision == "feasible" else "not confirmed",
        index=request.index,
        error=request.error,
        n_items=look.n_items,
        holdout_items=len(request.order),
        holdout_digest=request.digest,
        mean_diff=look.mean_diff,
        ci_low=look.ci_low,
    )
