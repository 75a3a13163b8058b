"""What the reference answers up front and what a candidate's floor may look at
(autotune.accuracy.reuse): the reference's stages are the floor's own, from the first at which a
candidate can pass, and a floor never looks past the items the reference has answered."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.accuracy.confirm import search_order
from autotune.accuracy.reuse import (
    FIRST_STAGE_ITEMS,
    answered_prefix,
    floor_request,
    reference_stages,
)
from autotune.accuracy.sequential import items_to_decide, stage_sizes
from autotune.engines.session import accuracy_batch_size
from autotune.evalset.dataset import EvalSet, load_evalset
from autotune.space import SearchSpace, load_space

REPO = Path(__file__).resolve().parents[2]


def _pool(size: int) -> EvalSet:
    """A set of `size` items shaped like the default space's pool (only its length and ids
    matter here: the stages are counted, not answered)."""
    base = load_evalset(REPO / "evalsets" / "ocr-caption")
    items = [
        base.items[k % len(base.items)].model_copy(update={"id": f"i{k}"}) for k in range(size)
    ]
    return EvalSet.model_construct(name="ocr-caption-3k", path=base.path, items=items)


@pytest.fixture(scope="module")
def default() -> SearchSpace:
    return load_space("default")


def test_the_default_reference_answers_the_floor_s_first_stage_a_candidate_can_pass_at(
    default: SearchSpace,
) -> None:
    pool = _pool(3000)
    batch = accuracy_batch_size(default, default.reference_config())
    assert batch == default.workload.accuracy_batch_size  # batched, not its load test's 1
    stages = reference_stages(default, pool, batch=batch)
    floor = default.constraints.accuracy
    verdict, needed = items_to_decide(np.zeros(3000), margin=-floor.max_drop, confidence=0.9)
    assert verdict == "feasible"
    # The stages run over the items the search floor may ask for: the held-out slice, which
    # confirms the recommendation, is asked for apart (autotune.accuracy.confirm).
    searched = len(search_order(default, pool))
    assert searched < 3000
    every = stage_sizes(searched, first=FIRST_STAGE_ITEMS, batch=batch)
    # Up front: the floor's first stage holding as many items as a candidate that answers
    # word for word as the reference needs to pass; no stage before it could pass anyone.
    first = every.index(stages[0])
    assert stages[0] >= needed > every[first - 1]
    assert stages == every[first:] and stages[-1] == searched
    assert stages[0] < 3000 / 10  # what issue 53 is about: not the whole pool up front


def test_without_a_relative_sequential_floor_the_reference_answers_every_item(
    default: SearchSpace,
) -> None:
    pool = _pool(500)
    for change in ({"test": "bootstrap"}, {"mode": "absolute", "min": 0.5}, {"enabled": False}):
        accuracy = default.constraints.accuracy.model_copy(update=change)
        space = default.model_copy(
            update={"constraints": default.constraints.model_copy(update={"accuracy": accuracy})}
        )
        assert reference_stages(space, pool, batch=32) == [500], change


def test_a_floor_looks_only_at_the_items_the_reference_has_answered(
    default: SearchSpace,
) -> None:
    pool = _pool(3000)
    order = pool.decision_order()
    reference = dict.fromkeys(order[:256], 1.0) | {order[400]: 1.0}  # and one item past a gap
    assert answered_prefix(order, reference) == 256
    request = floor_request(default, pool, reference, batch=64)
    assert request is not None and request.order == order[:256]
    assert request.stages[-1] == 256 and all(s <= 256 for s in request.stages)
    # A candidate that matches the reference on all 256 has shown what it can there.
    look = request.judge(dict.fromkeys(order[:256], 1.0))
    assert look.decision == "feasible" and look.n_items == 256
