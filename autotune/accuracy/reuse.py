"""Not paying twice for the same answers, and what a trial's accuracy pass is asked.

Greedy answers depend only on the output-affecting parameters (autotune.params: everything but
batch_size and kv_cache_fraction, and batch_size too when sampling). A trial whose key matches
a completed trial's reuses that trial's scored answers instead of answering the set again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.accuracy.confirm import search_order
from autotune.accuracy.scoring import AccuracyReport
from autotune.accuracy.sequential import items_to_decide, stage_sizes
from autotune.accuracy.staged import FloorRequest
from autotune.evalset.dataset import EvalSet
from autotune.params import TrialConfig
from autotune.records.stored import TrialRecord
from autotune.space import SearchSpace


@cache
def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def accuracy_key(config: TrialConfig, evalset: EvalSet) -> str:
    """A stable string naming the answers this configuration gives on this set."""
    key = {"config": config.output_key(), "evalset": _file_digest(Path(evalset.path))}
    return json.dumps(key, sort_keys=True)


def find_reusable(study: optuna.Study, key: str) -> FrozenTrial | None:
    """A completed trial with the same answers key and a full set of scored answers."""
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        record = TrialRecord.of(trial)
        if record.output_key == key and "item_passed" in record.model_fields_set:
            return trial
    return None


def stored_accuracy(trial: FrozenTrial) -> AccuracyReport:
    record = TrialRecord.of(trial)
    return AccuracyReport(
        accuracy=float(record.accuracy if record.accuracy is not None else math.nan),
        by_category=dict(record.accuracy_by_category),
        item_scores=dict(record.item_scores),
        item_passed=dict(record.item_passed),
    )


# The floor's first look: fewer items decide nothing but a large drop (an identical candidate
# needs about log(1 / (1 - confidence)) / max_drop items to pass).
FIRST_STAGE_ITEMS = 20


def screening_ids(evalset: EvalSet, n: int) -> list[str]:
    """The first `n` items the floor asks for: every category in its share of the set."""
    return evalset.decision_order()[:n]


def answered_prefix(order: Sequence[str], known: Mapping[str, object] | None) -> int:
    """How many items of `order`, from its start, `known` holds."""
    count = 0
    for item_id in order:
        if known is None or item_id not in known:
            break
        count += 1
    return count


def floor_request(
    space: SearchSpace,
    evalset: EvalSet,
    reference: Mapping[str, float] | None,
    *,
    batch: int = 1,
) -> FloorRequest | None:
    """How a candidate's accuracy pass answers and stops (the sequential floor), screening
    included; None where it answers every item: no floor, another test, or no reference to
    compare with (the reference itself).

    `reference`: the reference's item scores. A relative floor can only look at items the
    reference has answered, so its order stops at the end of the reference's answered
    prefix (autotune.study.run.reference_load extends the reference when a candidate is
    undecided there).
    """
    floor = space.constraints.accuracy
    if not floor.enabled or floor.test != "sequential":
        return None
    if floor.mode == "relative" and reference is None:
        return None
    order = search_order(space, evalset)  # never the items held out to confirm
    if floor.mode == "relative":
        order = order[: answered_prefix(order, reference)]
    screening = space.screening.items if space.screening.items < len(order) else 0
    return FloorRequest(
        order=order,
        stages=stage_sizes(len(order), first=max(screening, FIRST_STAGE_ITEMS), batch=batch),
        screening_items=screening,
        reference_scores=None if floor.mode == "absolute" else dict(reference or {}),
        margin=floor.min if floor.mode == "absolute" else -floor.max_drop,
        confidence=floor.confidence,
    )


@cache
def _items_to_pass_identical(pool: int, max_drop: float, confidence: float) -> int:
    verdict, count = items_to_decide(np.zeros(pool), margin=-max_drop, confidence=confidence)
    return int(count) if verdict == "feasible" else pool


def reference_stages(space: SearchSpace, evalset: EvalSet, *, batch: int) -> list[int]:
    """How many items of the decision order the reference has answered after each of its
    stages: all of them at once unless the floor is relative and sequential.

    Under that floor a candidate can only pass once its paired differences have shown no
    loss, which takes a candidate that answers word for word as the reference a fixed number
    of items (log(1 / (1 - confidence)) / max_drop, about); no verdict of a passing candidate
    comes sooner. So the reference answers, up front, the floor's first stage (at its own
    accuracy batch) that holds that many; each later stage is the floor's next one, answered
    when a candidate is still undecided at the end of the previous.
    """
    pool = len(search_order(space, evalset))  # the held-out slice is asked for apart
    floor = space.constraints.accuracy
    if not (floor.enabled and floor.test == "sequential" and floor.mode == "relative"):
        return [pool]
    screening = space.screening.items if space.screening.items < pool else 0
    return staged_reference(
        pool, screening=screening, max_drop=floor.max_drop, confidence=floor.confidence, batch=batch
    )


def staged_reference(
    pool: int, *, screening: int, max_drop: float, confidence: float, batch: int
) -> list[int]:
    """The reference's stages over a searched pool of `pool` items under a relative sequential
    floor (reference_stages): the floor's looks from the first that holds the items a
    candidate answering word for word as the reference needs to pass. A dummy-weights study's
    timed reference takes the same stages (autotune.accuracy.timed)."""
    stages = stage_sizes(pool, first=max(screening, FIRST_STAGE_ITEMS), batch=batch)
    needed = _items_to_pass_identical(pool, max_drop, confidence)
    return [size for size in stages if size >= needed] or [pool]
