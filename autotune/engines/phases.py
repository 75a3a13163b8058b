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
4. accuracy, unless the trial lost its race (its answers would decide nothing): a stage at a
   time until the floor decides or the set runs out (autotune.accuracy.sequential), the
   screening answers standing (greedy answers do not depend on the batch).

With dummy weights the pass is timed, not judged (autotune.accuracy.timed): the same phases
answer the plan's `timed` items in the floor's stages, each answer forced to its length, and
only how long they took and how many tokens each answer held come back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from autotune.accuracy.sequential import FloorLook
from autotune.accuracy.staged import FloorRequest
from autotune.engines.session import EstimateCallback, MeasurePlan, PhaseCallback
from autotune.measure.convergence import RACED, SteadyRule
from autotune.measure.repeats import ImageRepeats
from autotune.measure.timing import RequestTiming
from autotune.records import PassesResult, Reply

# The floor's verdict on the answers so far (accuracy.staged.look_at_answers over the session's
# eval set).
Judge = Callable[[dict[str, str], FloorRequest], FloorLook]
SCREENED_OUT = "screened out"
ANSWERS_ONLY = "answers only"  # a plan without a load test (MeasurePlan.load_test)


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

    async def answer(
        self,
        ids: Sequence[str],
        concurrency: int,
        lengths: Mapping[str, int] | None = None,
        on_reply: Callable[[], None] | None = None,
    ) -> list[Reply]:
        """Answers to these eval items with the trial's own decoding settings; with `lengths`
        each answer forced to its item's length in tokens (a timed pass). `on_reply` is
        called as each answer arrives."""
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

    if not plan.load_test:
        return await _answers_only(driver, plan, phase)
    warmup_s = 0.0
    if driver.separate_warmup:
        phase("warm-up")
        started = time.perf_counter()
        await driver.warm_up()
        warmup_s = time.perf_counter() - started

    floor = plan.floor if judge is not None else None
    answers = _Answers(driver, plan, phase)
    verdict: FloorLook | None = None
    screening_s = 0.0
    screening = _screening_ids(floor, plan)
    if screening:
        phase("screening")
        started = time.perf_counter()
        await answers.add(screening, batch_size)
        if floor is not None:
            verdict = judge(answers.texts, floor)  # type: ignore[misc]
        screening_s = time.perf_counter() - started
        if verdict is not None and verdict.decision == "infeasible":
            now = driver.now()
            return PassesResult(
                warmup_s=warmup_s,
                load_start=now,
                load_stop=now,
                screening_s=screening_s,
                timings=[],
                stop_reason=SCREENED_OUT,
                predictions=answers.texts,
                screened_out=True,
            )

    phase("load test")
    repeats = ImageRepeats(plan.repeat_image_share, seed=plan.seed)
    load = await driver.load_test(plan.rule(), repeats, on_estimate)

    accuracy_s = 0.0
    if plan.accuracy_ids is not None and load.stop_reason != RACED:
        phase("accuracy")
        started = time.perf_counter()
        await _answer_accuracy(answers, plan, floor, judge, verdict)
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
        # A timed pass's answers are noise: only their token counts come back.
        predictions={} if plan.timed is not None else answers.texts,
        timed_tokens=answers.tokens if plan.timed is not None else {},
        screened_out=False,
        repeated_requests=repeats.repeated,
        context_only=plan.context_only,  # how its figures are read (autotune.measure.summary)
    )


class _Answers:
    """The trial's answers so far: their texts, and each answer's tokens (usage). With
    `plan.count_answers`, a phase 'accuracy: 40/240 items' each twentieth of the items: a
    long pass (`autotune eval` on a busy machine) otherwise shows nothing for minutes."""

    def __init__(self, driver: PhaseDriver, plan: MeasurePlan, phase: PhaseCallback) -> None:
        self.driver = driver
        self.lengths = plan.timed.lengths if plan.timed is not None else None
        self.texts: dict[str, str] = {}
        self.tokens: dict[str, int] = {}
        self.total = len(plan.accuracy_ids or [])
        self.counted = 0
        self.on_reply = self._count if plan.count_answers and self.total else None
        self.phase = phase

    def _count(self) -> None:
        self.counted += 1
        if self.counted % max(1, self.total // 20) == 0 or self.counted == self.total:
            self.phase(f"accuracy: {self.counted}/{self.total} items")

    async def add(self, ids: Sequence[str], concurrency: int) -> None:
        for reply in await self.driver.answer(ids, concurrency, self.lengths, self.on_reply):
            self.texts[reply.item_id] = reply.text
            self.tokens[reply.item_id] = reply.timing.output_tokens


def _screening_ids(floor: FloorRequest | None, plan: MeasurePlan) -> list[str]:
    """The items answered before the load test: the floor's first stage, or a timed pass's."""
    if floor is not None:
        return floor.order[: floor.screening_items]
    if plan.timed is not None:
        return plan.timed.order[: plan.timed.screening_items]
    return []


async def _answers_only(
    driver: PhaseDriver, plan: MeasurePlan, phase: Callable[[str], None]
) -> PassesResult:
    """The accuracy ids answered, and nothing else: no warm-up, screening or load."""
    phase("accuracy")
    started = time.perf_counter()
    answers = _Answers(driver, plan, phase)
    await answers.add(plan.accuracy_ids or [], plan.accuracy_batch_size)
    now = driver.now()
    return PassesResult(
        load_start=now,
        load_stop=now,
        accuracy_s=time.perf_counter() - started,
        timings=[],
        stop_reason=ANSWERS_ONLY,
        # A timed pass's answers are noise: only their token counts come back.
        predictions={} if plan.timed is not None else answers.texts,
        timed_tokens=answers.tokens if plan.timed is not None else {},
    )


async def _answer_accuracy(
    answers: _Answers,
    plan: MeasurePlan,
    floor: FloorRequest | None,
    judge: Judge | None,
    verdict: FloorLook | None,
) -> None:
    """Every accuracy item; under the sequential floor (or a timed pass, unjudged) a stage
    at a time, the floor's until it decides."""
    if floor is not None and judge is not None:
        order, stages = floor.order, floor.stages
    elif plan.timed is not None:
        order, stages = plan.timed.order, plan.timed.stages
    else:
        order = plan.accuracy_ids or []
        stages = [len(order)]
    for size in stages:
        if verdict is not None and verdict.decision != "undecided":
            break
        todo = [item_id for item_id in order[:size] if item_id not in answers.texts]
        if todo:
            await answers.add(todo, plan.accuracy_batch_size)
        if floor is not None and judge is not None:
            verdict = judge(answers.texts, floor)
