"""The in-process worker's timed accuracy pass (dummy weights): every answer as long as its
item's rule says, in static batches that decode until their longest answer ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.accuracy.timed import timed_accuracy
from autotune.checkpoints.dummy import dummy_checkpoint
from autotune.engines import measure_plan, open_session
from autotune.evalset.dataset import load_evalset
from autotune.space import AccuracyConstraint, load_space
from autotune.study.run.trial_plan import reference_plan

TINY = Path(__file__).resolve().parents[3] / "models" / "tiny-qwen3-vl"


@pytest.mark.slow
def test_timed_answers_hold_each_items_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOTUNE_DUMMY_DIR", str(tmp_path / "dummy"))
    space = load_space("smoke")
    workload = space.workload.model_copy(
        update={"warmup_requests": 1, "requests": 2, "max_warmup_s": 1, "max_measure_s": 2}
    )
    space = space.model_copy(update={"workload": workload})
    model_path = dummy_checkpoint(str(TINY), device="cpu")
    evalset = load_evalset("smoke")
    timed = timed_accuracy(
        AccuracyConstraint(max_drop=0.3), screening_items=12, evalset=evalset, model_path=model_path
    )
    config = space.reference_config().model_copy(update={"backend": "transformers"})
    trial = timed.trial_pass(batch=8, max_new_tokens=config.max_new_tokens, reference=False)
    # The search floor's items (screening's 12 first), then the held-out slice's, as a
    # candidate the floor passes would answer them.
    searched = [i for i in trial.order if i not in timed.held_out]
    assert len(searched) == 24 and len(trial.order) > 24
    assert len(set(trial.lengths.values())) > 1
    phases: list[str] = []
    session = open_session(space, config, model_path=model_path, evalset=evalset)
    try:
        plan = measure_plan(space, config, accuracy_ids=None, timed=trial)
        result = session.measure(config, plan, on_phase=phases.append)
    finally:
        session.close()
    # The engine's own count of each answer's tokens: the rule's length, item by item.
    assert result.timed_tokens == trial.lengths
    assert list(result.timed_tokens) == trial.order  # screening's 12 first, then the rest
    assert result.predictions == {}  # noise is never kept
    assert result.screening_s > 0 and result.accuracy_s > 0
    assert [p for p in phases if p in ("screening", "load test", "accuracy")] == [
        "screening",
        "load test",
        "accuracy",
    ]


@pytest.mark.slow
def test_the_capped_reference_plan_reaches_its_result_through_the_worker(tmp_path: Path) -> None:
    """The reference's plan is context only (autotune.study.run.trial_plan.reference_plan);
    the worker's phases carry that onto the result its figures are read from, so a load too
    short for a window is read after its first request, and any other plan's result is not."""
    space = load_space("smoke")
    workload = space.workload.model_copy(
        update={"warmup_requests": 1, "requests": 2, "max_warmup_s": 1, "max_measure_s": 2}
    )
    space = space.model_copy(update={"workload": workload})
    config = space.reference_config().model_copy(update={"backend": "transformers"})
    session = open_session(space, config, model_path=str(TINY), evalset=load_evalset("smoke"))
    try:
        plan = measure_plan(space, config, accuracy_ids=None)
        capped = session.measure(config, reference_plan(plan, max_s=2.0), on_phase=None)
        other = session.measure(config, plan, on_phase=None)
    finally:
        session.close()
    assert capped.context_only and not other.context_only
    assert capped.timings and other.timings  # each measured a load
