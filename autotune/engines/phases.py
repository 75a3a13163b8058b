"""One trial's phases, the same for every engine: warm-up, screening, load test, accuracy.

The in-process worker (autotune.engines.inprocess.worker) and the server passes
(autotune.engines.passes) differ only in how they send requests: a static batch through a
loaded model, or requests in flight over HTTP. What a trial does, and in which order, is
decided here once, so that a rule added to one engine holds for all of them:

1. warm-up, where the engine needs one apart from the load (compilation);
2. screening: the floor's first stage of items, and a trial the floor already shows to lose
   more than it allows stops there, before its load test;
3. the load test, until the stop rule says the rate has settled and is known, or that the
   trial lost its race (autotune.measure.convergence);
4. accuracy, unless the trial lost its race: its answers would decide nothing. Under the
   sequential floor (autotune.accuracy.sequential) a stage at a time, until the floor decides
   or the set runs out; every look, screening's included, belongs to one confidence
   sequence. The screening answers stand (greedy answers do not depend on the batch,
   tests/accuracy/test_output_neutral).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from autotune.accuracy.sequential import FloorLook
from autotune.accuracy.staged import FloorRequest
from autotune.engines.session import EstimateCallback, MeasurePlan, PhaseCallback
from autotune.measure.convergence import RACED, SteadyRule
from autotune.measure.repeats import ImageRepeats
from autotune.measure.timing import RequestTiming
from autotune.records import PassesResult

# The floor's verdict on the answers so far (accuracy.staged.look_at_answers over the session's
# eval set).
Judge = Callable[[dict[str, str], FloorRequest], FloorLook]
SCREENED_OUT = "screened out"


@dataclass
class LoadOutcome:
    """What an engine's load test returns to the phase sequence."""

    timings: list[RequestTiming]
    start: float  # on the driver's clock
    stop: float  # when it stopped starting requests
    ended: float  # when the requests in flight at `stop` had drained
    stop_reason: str
    min_warmup_s: float  # the first round's turnover, from `start`
    trail: list[dict[str, float | bool | str | None]] = field(default_factory=list)


class PhaseDriver(Protocol):
    """How one engine sends a trial's requests; run_phases decides which and when."""

    # Whether the engine needs a warm-up pass of its own before the load (a server's load
    # warms up in its own first seconds, cut where the rate settles).
    separate_warmup: bool

    def now(self) -> float:
        """The clock the load test's instants are read on."""
        ...

    async def warm_up(self) -> None: ...

    async def answer(self, ids: Sequence[str], concurrency: int) -> dict[str, str]:
        """Free answers (the trial's own decoding settings) to these eval items."""
        ...

    async def load_test(
        self, rule: SteadyRule, repeats: ImageRepeats, on_estimate: EstimateCallback | None
    ) -> LoadOutcome:
        """The trial's load until `rule` stops it; `repeats` chooses each request's image;
        `on_estimate` is shown what the rule sees every few seconds."""
        ...


async def run_phases(
    driver: PhaseDriver,
    plan: MeasurePlan,
    batch_size: int,
    *,
    judge: Judge | None,
    on_phase: PhaseCallback | None = None,
    on_estimate: EstimateCallback | None = None,
) -> PassesResult:
    """The trial's phases on `driver`, in order; what each took and what it answered."""

    def phase(name: str) -> None:
        if on_phase is not None:
            on_phase(name)

    warmup_s = 0.0
    if driver.separate_warmup:
        phase("warm-up")
        started = time.perf_counter()
        await driver.warm_up()
        warmup_s = time.perf_counter() - started

    floor = plan.floor if judge is not None else None
    predictions: dict[str, str] = {}
    verdict: FloorLook | None = None
    screening_s = 0.0
    if floor is not None and floor.screening_items:
        phase("screening")
        started = time.perf_counter()
        predictions = await driver.answer(floor.order[: floor.screening_items], batch_size)
        verdict = judge(predictions, floor)  # type: ignore[misc]
        screening_s = time.perf_counter() - started
        if verdict.decision == "infeasible":
            now = driver.now()
            return PassesResult(
                warmup_s=warmup_s,
                load_start=now,
                load_stop=now,
                screening_s=screening_s,
                timings=[],
                stop_reason=SCREENED_OUT,
                predictions=predictions,
                screened_out=True,
            )

    phase("load test")
    repeats = ImageRepeats(plan.repeat_image_share, seed=plan.seed)
    load = await driver.load_test(plan.rule(), repeats, on_estimate)

    accuracy_s = 0.0
    if plan.accuracy_ids is not None and load.stop_reason != RACED:
        phase("accuracy")
        started = time.perf_counter()
        predictions = await _answer_accuracy(driver, plan, floor, judge, predictions, verdict)
        accuracy_s = time.perf_counter() - started
    return PassesResult(
        warmup_s=warmup_s,
        load_s=load.ended - load.start,
        load_start=load.start,
        load_stop=load.stop,
        min_warmup_s=load.min_warmup_s,
        accuracy_s=accuracy_s,
        screening_s=screening_s,
        timings=load.timings,
        stop_reason=load.stop_reason,
        stop_rule_trail=load.trail,
        predictions=predictions,
        screened_out=False,
        repeated_requests=repeats.repeated,
    )


async def _answer_accuracy(
    driver: PhaseDriver,
    plan: MeasurePlan,
    floor: FloorRequest | None,
    judge: Judge | None,
    predictions: dict[str, str],
    verdict: FloorLook | None,
) -> dict[str, str]:
    """Every accuracy item, or under the sequential floor a stage at a time until it decides."""
    answered = dict(predictions)
    if floor is None or judge is None:
        todo = [item_id for item_id in plan.accuracy_ids or [] if item_id not in answered]
        return {**answered, **await driver.answer(todo, plan.accuracy_batch_size)}
    for size in floor.stages:
        if verdict is not None and verdict.decision != "undecided":
            break
        todo = [item_id for item_id in floor.order[:size] if item_id not in answered]
        if todo:
            answered |= await driver.answer(todo, plan.accuracy_batch_size)
        verdict = judge(answered, floor)
    if plan.confirmation is not None and verdict is not None and verdict.decision == "feasible":
        answered = await _answer_stages(driver, plan, plan.confirmation, judge, answered)
    return answered


async def _answer_stages(
    driver: PhaseDriver,
    plan: MeasurePlan,
    request: FloorRequest,
    judge: Judge,
    answered: dict[str, str],
) -> dict[str, str]:
    """The held-out items of a trial the floor passed, a stage at a time until the
    confirmation decides (autotune.accuracy.confirm)."""
    for size in request.stages:
        todo = [item_id for item_id in request.order[:size] if item_id not in answered]
        if todo:
            answered |= await driver.answer(todo, plan.accuracy_batch_size)
        if judge(answered, request).decision != "undecided":
            break
    return answered
