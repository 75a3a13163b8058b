"""One configuration's measurement: the figures a trial records, computed from a session result.

Study trials, `autotune eval` and `autotune verify` all turn an engine session's result into a
Measurement here, so a figure means the same in each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autotune import SCHEMA_VERSION, __version__
from autotune.accuracy.scoring import AccuracyReport, score_predictions
from autotune.accuracy.timed import TIMED_ANSWER_TOKENS, TIMED_ITEMS
from autotune.checkpoints.adapters import Adapter
from autotune.engines.session import MeasurePlan, Served
from autotune.evalset.dataset import EvalSet
from autotune.measure.equal_work import (
    RATIO,
    UNEQUAL_WORK,
    forced_length_ratio,
    unequal_work,
)
from autotune.measure.summary import summarize
from autotune.params import TrialConfig
from autotune.records import SessionResult
from autotune.records.parts import Environment, with_entries
from autotune.records.stored import TrialRecord
from autotune.space import SearchSpace


@dataclass
class Measurement:
    """Everything one trial of a configuration produced."""

    config: TrialConfig
    figures: dict[str, float]
    accuracy: AccuracyReport | None
    environment: dict[str, str]
    memory_source: str
    predictions: dict[str, str] = field(default_factory=dict)
    screened_out: bool = False
    stop_reason: str = ""
    time_s: dict[str, float] = field(default_factory=dict)
    # Load-test requests that resent an image of the same trial (workload.repeat_image_share).
    repeated_requests: int = 0
    # Why its answers were not the forced length (autotune.measure.equal_work); None: they were.
    unequal_work: str | None = None
    # A timed pass's tokens per answer (dummy weights: autotune.accuracy.timed).
    timed_tokens: dict[str, int] = field(default_factory=dict)

    def user_attrs(self) -> TrialRecord:
        """What a trial stores: figures with units in their names, plus provenance."""
        part = TrialRecord.part(**self.figures).joined(
            TrialRecord.part(
                config=self.config.model_dump(),
                memory_source=self.memory_source,
                environment=self.environment,
                measure_stop_reason=self.stop_reason,
                time_s=self.time_s,
                repeated_requests=self.repeated_requests,
                autotune_version=__version__,
                schema_version=SCHEMA_VERSION,
            )
        )
        if self.accuracy is not None:
            part = part.joined(self.accuracy.user_attrs())
        if self.predictions:
            part = part.joined(TrialRecord.part(predictions=self.predictions))
        if self.unequal_work is not None:
            part = part.joined(TrialRecord.part(**{UNEQUAL_WORK: self.unequal_work}))
        if self.timed_tokens:
            part = part.joined(TrialRecord.part(accuracy_timed_tokens=self.timed_tokens))
        return part


# Told the launch's address and requests, the plan and the measurement while the launch is
# still up (None: an in-process worker, which no HTTP client can reach).
WhileUp = Callable[[Served | None, MeasurePlan, Measurement], None]


def to_measurement(
    space: SearchSpace,
    config: TrialConfig,
    result: SessionResult,
    *,
    startup_s: float,
    evalset: EvalSet,
    measure_accuracy: bool,
) -> Measurement:
    """The figures of one session result (see autotune.engines.session)."""
    figures: dict[str, float] = {}
    unequal: str | None = None
    if not result.screened_out:
        figures = summarize(
            result.timings,
            load_start=result.load_start,
            load_stop=result.load_stop,
            min_warmup_s=result.min_warmup_s,
            confidence=space.workload.ci_confidence,
            launch_spread_rel=space.workload.launch_spread_rel,
            latency_slo_ms=space.constraints.latency_slo_ms,
            context_only=result.context_only,
        )
        if space.workload.output_tokens is not None:
            figures["forced_output_tokens"] = float(space.workload.output_tokens)
            figures["forced_output_tokens_spread_rel"] = space.workload.output_tokens_spread
            unequal = _check_equal_work(space, config, result, figures)
    # Warm-up: the explicit one (in-process compilation) and the start of the load that was
    # cut off as not yet steady; measuring: the rest of the load, its drain included.
    load_warmup_s = figures.get("load_warmup_s", 0.0)
    warmup_s = result.warmup_s + load_warmup_s
    figures["startup_s"] = startup_s
    figures["compile_s"] = warmup_s
    figures["peak_memory_mib"] = result.peak_memory_mib
    if result.timed_tokens:  # timed, not judged: how much it answered, never what
        figures[TIMED_ITEMS] = float(len(result.timed_tokens))
        figures[TIMED_ANSWER_TOKENS] = float(sum(result.timed_tokens.values()))
    predictions = result.predictions
    # A timed pass (dummy weights) answered for its time: nothing to score.
    scored = measure_accuracy and not result.timed_tokens
    report = score_predictions(evalset, predictions) if scored else None
    return Measurement(
        config=config,
        figures=figures,
        accuracy=report,
        environment=result.environment,
        memory_source=result.memory_source,
        predictions=predictions,
        screened_out=result.screened_out,
        stop_reason=result.stop_reason,
        repeated_requests=result.repeated_requests,
        unequal_work=unequal,
        timed_tokens=dict(result.timed_tokens),
        time_s={
            "warmup": warmup_s,
            "measuring": max(0.0, result.load_s - load_warmup_s),
            "accuracy": result.accuracy_s,
            "screening": result.screening_s,
        },
    )


def _check_equal_work(
    space: SearchSpace, config: TrialConfig, result: SessionResult, figures: dict[str, float]
) -> str | None:
    """The forced-length ratio into `figures`; why the work was unequal, or None."""
    mean = space.workload.output_tokens
    assert mean is not None
    environment = Environment.of(result.environment)
    in_process = environment.runner == "inprocess"  # one length, no spread
    spread = 0.0 if in_process else space.workload.output_tokens_spread
    ratio = forced_length_ratio(result.timings, mean=mean, spread=spread)
    if ratio is not None:
        figures[RATIO] = ratio
    return unequal_work(ratio, mean=mean, engine=environment.engine_name(config.backend))


def measure_once(
    space: SearchSpace,
    config: TrialConfig,
    *,
    model_path: str,
    evalset: EvalSet,
    measure_accuracy: bool = True,
    on_phase: Callable[[str], None] | None = None,
    endpoint: str | None = None,
    server_format: str | None = None,
    image_geometry: dict[str, int] | None = None,
    adapters: Sequence[Adapter] = (),
    quantized_paths: dict[str, str] | None = None,
    count_answers: bool = False,
    while_up: WhileUp | None = None,
) -> Measurement:
    """Launch `config`'s engine fresh, measure it once, stop it (TrialFailure on failure).

    In-process backends run in a new worker; server backends (or any config when
    `server_format` names an export format) run the exported server command; `endpoint`
    measures an already running server instead. `count_answers`: the accuracy pass reports
    its answers as phases (MeasurePlan.count_answers). `while_up` is called with the
    measurement before the launch stops, so another client can measure the same launch.
    """
    from autotune.engines import measure_plan, open_session

    session = open_session(
        space,
        config,
        model_path=model_path,
        evalset=evalset,
        endpoint=endpoint,
        server_format=server_format,
        image_geometry=image_geometry,
        on_phase=on_phase,
        adapters=adapters,
        quantized_paths=quantized_paths,
    )
    try:
        ids = [item.id for item in evalset.items]
        plan = measure_plan(space, config, accuracy_ids=ids if measure_accuracy else None)
        plan = plan.model_copy(update={"count_answers": count_answers})
        result = session.measure(config, plan, on_phase=on_phase)
        m = to_measurement(
            space,
            config,
            result,
            startup_s=session.startup_s,
            evalset=evalset,
            measure_accuracy=measure_accuracy,
        )
        if while_up is not None:
            while_up(session.served(config, plan), plan, m)
    finally:
        session.close()
    m.time_s["startup"] = session.startup_s
    m.environment = with_entries(m.environment, launch_id=session.launch_id)
    return m
