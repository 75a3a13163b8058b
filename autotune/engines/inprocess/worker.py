"""The worker process: loads one engine, measures it, reports JSON events, exits.

Started by autotune.engines.inprocess.session as
`python -m autotune.engines.inprocess.worker REQUEST.json`. Events go to the original stdout, one JSON object per line; everything libraries print goes to stderr (the log),
so stray output can never corrupt the event stream.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from itertools import cycle, islice
from typing import IO, Any

from pydantic import BaseModel

from autotune.params import TrialConfig


class ScreeningRequest(BaseModel):
    """Answer `ids` first and stop early when already worse than the floor with confidence."""

    ids: list[str]
    reference_scores: dict[str, float]
    reference_passed: dict[str, bool]
    max_drop: float
    confidence: float


class WorkerRequest(BaseModel):
    config: TrialConfig
    model: str
    device: str = "auto"
    evalset: str
    workload_ids: list[str]
    warmup_requests: int
    requests: int
    accuracy_ids: list[str] | None = None
    screening: ScreeningRequest | None = None


class _Events:
    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def send(self, **event: Any) -> None:
        self.stream.write(json.dumps(event) + "\n")
        self.stream.flush()


def _batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def run(request: WorkerRequest, events: _Events) -> dict[str, Any]:
    from autotune.engines.inprocess.base import Engine, Request
    from autotune.engines.inprocess.transformers import TransformersEngine
    from autotune.evalset.dataset import load_evalset

    evalset = load_evalset(request.evalset)
    by_id = {item.id: item for item in evalset.items}
    images: dict[str, Any] = {}

    def to_request(item_id: str) -> Request:
        if item_id not in images:
            images[item_id] = by_id[item_id].load_image()
        return Request(item_id=item_id, image=images[item_id], prompt=by_id[item_id].prompt)

    config = request.config
    engine: Engine = TransformersEngine(request.model, config, device=request.device)
    events.send(phase="loading")
    t0 = time.perf_counter()
    engine.load()
    startup_s = time.perf_counter() - t0

    batch = config.batch_size
    workload = [to_request(i) for i in islice(cycle(request.workload_ids), request.requests)]
    # Static cache + compile recompiles for every new shape: warm up on the whole workload so
    # compilation lands in compile_s and never in the measured latency.
    if config.compile_mode != "none":
        warmup = workload
    else:
        n_warm = -(-request.warmup_requests // batch) * batch
        warmup = [to_request(i) for i in islice(cycle(request.workload_ids), n_warm)]
    events.send(phase="warm-up")
    t0 = time.perf_counter()
    for group in _batches(warmup, batch):
        engine.generate(group)
    compile_s = time.perf_counter() - t0

    predictions: dict[str, str] = {}

    def answer(ids: list[str]) -> None:
        for group in _batches([to_request(i) for i in ids if i not in predictions], batch):
            for completion in engine.generate(group):
                predictions[completion.item_id] = completion.text

    screened_out = False
    if request.screening is not None:
        events.send(phase="screening")
        answer(request.screening.ids)
        screened_out = _screened_out(evalset, predictions, request.screening)

    timings = []
    if not screened_out:
        events.send(phase="load test")
        for group in _batches(workload, batch):
            timings.extend(completion.timing.to_dict() for completion in engine.generate(group))
        if request.accuracy_ids is not None:
            events.send(phase="accuracy")
            answer(request.accuracy_ids)

    peak_mib, memory_source = engine.peak_memory_mib()
    info = engine.describe()
    engine.close()
    return {
        "startup_s": startup_s,
        "compile_s": compile_s,
        "timings": timings,
        "predictions": predictions,
        "screened_out": screened_out,
        "peak_memory_mib": peak_mib,
        "memory_source": memory_source,
        "environment": info,
    }


def _screened_out(evalset: Any, predictions: dict[str, str], screening: ScreeningRequest) -> bool:
    """True when even the optimistic end of the interval misses the floor."""
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


def _failure_kind(exc: BaseException) -> str:
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or name == "OutOfMemoryError" or "out of memory" in str(exc):
        return "oom"
    return "error"


def main(argv: list[str]) -> int:
    # Keep the real stdout for events; send everything else (C-level prints too) to stderr.
    events = _Events(os.fdopen(os.dup(1), "w"))
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        with open(argv[0], encoding="utf-8") as handle:
            request = WorkerRequest.model_validate_json(handle.read())
        result = run(request, events)
    except BaseException as exc:  # report every failure as an event: the parent records it
        traceback.print_exc()
        events.send(error={"kind": _failure_kind(exc), "reason": f"{type(exc).__name__}: {exc}"})
        return 1
    events.send(result=result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
