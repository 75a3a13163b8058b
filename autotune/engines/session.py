"""One running engine that measures trial after trial: the shape every runner shares.

A session is one launch: a worker process holding a loaded model, a server command, or an
endpoint someone else runs. `measure` runs one trial's request-time settings on it (a load
test at the trial's concurrency until its rate has settled and is known, then the accuracy
pass) and returns one SessionResult (autotune.records) whatever the engine, so a figure means
the same for every backend.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from autotune.accuracy.staged import FloorRequest
from autotune.accuracy.timed import TimedPass
from autotune.measure.convergence import RaceBound, SteadyRule
from autotune.measure.lengths import AnswerLengths
from autotune.params import TrialConfig
from autotune.records import Prompt, SessionResult
from autotune.space import SearchSpace

PhaseCallback = Callable[[str], None]
# Shown the load test's running estimate every few seconds (a stop-rule trail entry: elapsed_s,
# tokens_per_s, ci_rel, ...). Called on the load's own event loop: it must not block.
EstimateCallback = Callable[[dict[str, Any]], None]


class MeasurePlan(BaseModel):
    """What one trial measures on a running engine (sent as JSON to worker processes)."""

    warmup_requests: int  # the warm-up lasts at least until this many requests completed
    workload_requests: int  # one pass: the measured load cycles this many requests
    min_requests: int  # two passes: an open loop's fixed schedule
    max_requests: int
    max_measure_s: float  # the steady window at most
    max_load_s: float  # warm-up and steady window together at most
    target_ci_rel: float
    confidence: float
    # Every load-test answer exactly this long (equal work); None: as the engine answers.
    output_tokens: int | None = None
    output_tokens_spread: float = 0.0  # lengths spread around output_tokens (measure.lengths)
    request_rate_per_s: float | None = None
    accuracy_ids: list[str] | None = None  # None: no accuracy pass
    # False: the accuracy pass alone, more answers for a trial already measured (its floor,
    # or the reference's later stages: autotune.study.run.reference_load).
    load_test: bool = True
    accuracy_batch_size: int = 1
    # Report the accuracy pass's answers as they come, as phases (`autotune eval`'s progress).
    count_answers: bool = False
    # The sequential floor: answer accuracy_ids a stage at a time (screening first) and stop
    # once it decides; None: answer every id.
    floor: FloorRequest | None = None
    # Dummy weights: the accuracy pass for its time alone (autotune.accuracy.timed), in place
    # of accuracy_ids and the floor; its answers are counted, never kept or judged.
    timed: TimedPass | None = None
    repeat_image_share: float = 0.0
    seed: int = 0  # which load-test requests repeat an image (autotune.measure.repeats)
    # Racing (autotune.measure.convergence): the incumbent this trial must beat; None: none.
    race: RaceBound | None = None
    # Its figure only gives context (a reference the deploy target cannot run, its load
    # capped short): a load too short for a steady window is read after its first request
    # (autotune.measure.summary) rather than failed.
    context_only: bool = False

    def answer_lengths(self) -> AnswerLengths | None:
        """The forced length of each load-test request in start order; None: not forced."""
        if self.output_tokens is None:
            return None
        return AnswerLengths(self.output_tokens, self.output_tokens_spread)

    def rule(self) -> SteadyRule:
        return SteadyRule(
            target_ci_rel=self.target_ci_rel,
            confidence=self.confidence,
            max_measure_s=self.max_measure_s,
            max_load_s=self.max_load_s,
            max_requests=self.max_requests,
            race=self.race,
        )


def accuracy_batch_size(space: SearchSpace, config: TrialConfig) -> int:
    """How many accuracy items go in one batch (or in flight) for `config`."""
    # Answers depend on the batch only when sampling or when a compiled engine would compile
    # the accuracy pass's new batch shape; otherwise the larger batch only saves time.
    if config.do_sample or config.compile_mode != "none":
        return config.batch_size
    return space.workload.accuracy_batch_size or config.batch_size


def measure_plan(
    space: SearchSpace,
    config: TrialConfig,
    *,
    accuracy_ids: list[str] | None,
    floor: FloorRequest | None = None,
    max_seconds: float | None = None,
    race: RaceBound | None = None,
    timed: TimedPass | None = None,
) -> MeasurePlan:
    """The plan for `config` under the space's workload; `max_seconds` may shorten the load
    test, warm-up included (the budget); `race`: the incumbent it must beat to go on;
    `timed`: an accuracy pass timed, not judged (dummy weights), which answers its own items."""
    workload = space.workload
    one_pass = workload.pass_requests(config.batch_size)
    max_load_s = workload.max_warmup_s + workload.max_measure_s
    if max_seconds is not None:
        max_load_s = min(max_load_s, max_seconds)
    accuracy_batch = accuracy_batch_size(space, config)
    return MeasurePlan(
        warmup_requests=workload.warmup_requests,
        workload_requests=one_pass,
        min_requests=2 * one_pass,
        max_requests=workload.most_requests(config.batch_size),
        max_measure_s=min(workload.max_measure_s, max_load_s),
        max_load_s=max_load_s,
        target_ci_rel=workload.target_ci_rel,
        confidence=workload.ci_confidence,
        output_tokens=workload.output_tokens,
        output_tokens_spread=workload.output_tokens_spread,
        request_rate_per_s=workload.request_rate_per_s,
        accuracy_ids=timed.order if timed is not None else accuracy_ids,
        accuracy_batch_size=accuracy_batch,
        floor=None if timed is not None else floor,
        timed=timed,
        repeat_image_share=workload.repeat_image_share,
        seed=config.seed,
        race=race,
    )


@dataclass(frozen=True)
class Served:
    """Where a launch answers over HTTP and what a trial's load-test requests carry there, so
    that another client (autotune.outside) can send the very same requests."""

    base_url: str  # http://host:port, without /v1
    model: str
    fields: dict[str, Any]  # the trial's request fields (max_tokens, decoding)
    forced: Callable[[int], dict[str, Any]] | None  # a forced answer length's fields
    prompts: list[Prompt]  # the items in the order load tests cycle them


class EngineSession(Protocol):
    """One launch of an engine, measured trial after trial."""

    launch_id: str
    launch_key: tuple[Any, ...]
    startup_s: float

    def measure(
        self,
        config: TrialConfig,
        plan: MeasurePlan,
        *,
        on_phase: PhaseCallback | None,
        on_estimate: EstimateCallback | None = None,
    ) -> SessionResult:
        """One trial's SessionResult; TrialFailure when it cannot complete."""

    def alive(self) -> bool:
        """Whether the engine can measure another trial."""

    def served(self, config: TrialConfig, plan: MeasurePlan) -> Served | None:
        """Where `config`'s requests go over HTTP; None for an engine in a worker process."""

    def close(self) -> None:
        """Stop the engine and everything it started; safe to call twice."""


class PendingSession(Protocol):
    """A launch started in the background (autotune.engines.begin_session): `start` waits
    until it is ready and returns it, TrialFailure when it did not come up."""

    launch_key: tuple[Any, ...]

    def start(self, *, on_phase: PhaseCallback | None = None) -> EngineSession:
        """The ready session (its startup_s: from its start until it answered)."""

    def close(self) -> None:
        """Stop it, started or not; safe to call twice."""


_process_tag = uuid.uuid4().hex[:8]
_launch_numbers = itertools.count(1)


def new_launch_id() -> str:
    """Unique across processes sharing a study: this process's tag and a counter."""
    return f"{_process_tag}-{next(_launch_numbers)}"


def cycled(ids: list[str], count: int) -> list[str]:
    """The first `count` ids of the eval set repeated: every runner sends the same sequence."""
    return list(itertools.islice(itertools.cycle(ids), count))
