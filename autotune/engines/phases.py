"""One trial's phases, the same for every engine: warm-up, screening, load test, accuracy.

The in-process worker (autotune.engines.inprocess.worker) and the server passes
(autotune.engines.passes) differ only in how they send requests: a static batch through a
loaded model, or requests in flight over HTTP. What a trial does, and in which order, is
decided here once, so that a rule added to one engine holds for all of them:

1. warm-up, where the engine needs one apart from the load (compilation);
2. screening: the screening items first, and a trial already under the accuracy floor with
   confidence stops there (autotune.accuracy.screening), before its load test;
3. the load test, until the stop rule says the rate has settled and is known, or that the
   trial lost its race (autotune.measure.convergence);
4. accuracy, unless the trial lost its race: its answers would decide nothing. The screening
   answers stand (greedy answers do not depend on the batch, tests/test_output_neutral).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from autotune.accuracy.screening import ScreeningRequest
from autotune.engines.session import EstimateCallback, MeasurePlan, PhaseCallback
from autotune.measure.convergence import RACED, SteadyRule
from autotune.measure.repeats import ImageRepeats
from autotune.measure.timing import RequestTiming
from autotune.records import PassesResult

# Whether screening answers already miss the floor with confidence (accuracy.screening.hopeless
# over the session's eval set).
Screen = Callable[[dict[str, str], ScreeningRequest], bool]
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
    screen: Screen | None,
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

    predictions: dict[str, str] = {}
    screening_s = 0.0
    if plan.screening is not None and screen is not None:
        phase("screening")
        started = time.perf_counter()
        predictions = await driver.answer(plan.screening.ids, batch_size)
        hopeless = screen(predictions, plan.screening)
        screening_s = time.perf_counter() - started
        if hopeless:
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
        todo = [item_id for item_id in plan.accuracy_ids if item_id not in predictions]
        predictions = {**predictions, **await driver.answer(todo, plan.accuracy_batch_size)}
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
