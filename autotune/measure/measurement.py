"""Measure one configuration: run it, score its answers, and compute every recorded figure.

The same code serves study trials and `autotune eval`, so a figure means the same in both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotune import SCHEMA_VERSION, __version__
from autotune.accuracy.scoring import AccuracyReport, score_predictions
from autotune.engines.endpoint import run_endpoint_trial
from autotune.engines.inprocess.session import run_worker
from autotune.engines.inprocess.worker import ScreeningRequest, WorkerRequest
from autotune.engines.server import run_server_trial
from autotune.evalset.dataset import EvalSet
from autotune.measure.timing import RequestTiming, summarize
from autotune.params import SERVER_BACKENDS, TrialConfig
from autotune.space import SearchSpace


@dataclass
class Measurement:
    """Everything one run of a configuration produced."""

    config: TrialConfig
    figures: dict[str, float]
    accuracy: AccuracyReport | None
    environment: dict[str, str]
    memory_source: str
    predictions: dict[str, str] = field(default_factory=dict)
    screened_out: bool = False

    def user_attrs(self) -> dict[str, Any]:
        """What a trial stores: figures with units in their names, plus provenance."""
        attrs: dict[str, Any] = dict(self.figures)
        attrs["config"] = self.config.model_dump()
        attrs["memory_source"] = self.memory_source
        attrs["environment"] = self.environment
        attrs["autotune_version"] = __version__
        attrs["schema_version"] = SCHEMA_VERSION
        if self.accuracy is not None:
            attrs.update(self.accuracy.user_attrs())
        if self.predictions:
            attrs["predictions"] = self.predictions
        return attrs


def measure(
    space: SearchSpace,
    config: TrialConfig,
    *,
    model_path: str,
    evalset: EvalSet,
    measure_accuracy: bool = True,
    on_phase: Callable[[str], None] | None = None,
    endpoint: str | None = None,
    server_format: str | None = None,
    screening: ScreeningRequest | None = None,
) -> Measurement:
    """Run `config` and return its measurement (TrialFailure on failure).

    In-process backends run in a fresh worker; server backends (or any config when
    `server_format` names an export format) run the exported server command; `endpoint`
    measures an already running server instead.
    """
    if endpoint is not None:
        result = run_endpoint_trial(
            endpoint,
            config,
            space=space,
            evalset=evalset,
            measure_accuracy=measure_accuracy,
            on_phase=on_phase,
        )
    elif server_format is not None or config.backend in SERVER_BACKENDS:
        result = run_server_trial(
            config,
            space=space,
            model_path=model_path,
            evalset=evalset,
            fmt=server_format,
            measure_accuracy=measure_accuracy,
            on_phase=on_phase,
        )
    else:
        ids = [item.id for item in evalset.items]
        request = WorkerRequest(
            config=config,
            model=model_path,
            device=space.device,
            evalset=str(evalset.path),
            workload_ids=ids,
            warmup_requests=space.workload.warmup_requests,
            requests=space.workload.measured_requests(config.batch_size),
            accuracy_ids=ids if measure_accuracy else None,
            screening=screening if measure_accuracy else None,
        )
        result, _log = run_worker(request, timeout_s=space.trial_timeout_s, on_phase=on_phase)
    timings = [RequestTiming(**t) for t in result["timings"]]
    screened_out = bool(result.get("screened_out"))
    # A screened-out trial stopped before its load test: it has accuracy figures only.
    figures = (
        {} if screened_out else summarize(timings, latency_slo_ms=space.constraints.latency_slo_ms)
    )
    figures["startup_s"] = result["startup_s"]
    figures["compile_s"] = result["compile_s"]
    figures["peak_memory_mib"] = result["peak_memory_mib"]
    predictions = result["predictions"] or {}
    report = score_predictions(evalset, predictions) if measure_accuracy else None
    return Measurement(
        config=config,
        figures=figures,
        accuracy=report,
        environment=result["environment"],
        memory_source=result["memory_source"],
        predictions=predictions,
        screened_out=screened_out,
    )
