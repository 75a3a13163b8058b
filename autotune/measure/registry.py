"""Every metric a trial records, with its unit and the direction that is better.

Objectives, constraints, `best` and reports look metrics up here, so a name means one thing
everywhere and every name carries its unit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["maximize", "minimize"]

# The figure studies rank by first, racing races on and verify checks first.
THROUGHPUT = "throughput_output_tokens_per_s"


@dataclass(frozen=True)
class MetricSpec:
    name: str
    direction: Direction
    description: str


_SPECS = [
    MetricSpec(THROUGHPUT, "maximize", "Output tokens per second, all requests."),
    MetricSpec("throughput_requests_per_s", "maximize", "Completed requests per second."),
    MetricSpec(
        "goodput_requests_per_s", "maximize", "Requests per second meeting the latency SLO."
    ),
    MetricSpec("ttft_p50_ms", "minimize", "Time to first token, median."),
    MetricSpec("ttft_p95_ms", "minimize", "Time to first token, 95th percentile."),
    MetricSpec("tpot_p50_ms", "minimize", "Time per output token after the first, median."),
    MetricSpec(
        "tpot_p95_ms", "minimize", "Time per output token after the first, 95th percentile."
    ),
    MetricSpec("e2e_latency_p50_ms", "minimize", "Request end-to-end latency, median."),
    MetricSpec("e2e_latency_p95_ms", "minimize", "Request end-to-end latency, 95th percentile."),
    MetricSpec("peak_memory_mib", "minimize", "Peak memory of the engine (GPU, else process RSS)."),
    MetricSpec("accuracy", "maximize", "Mean item score on the evaluation set (0 to 1)."),
    MetricSpec("startup_s", "minimize", "Model load / server start-up time, not in latency."),
    MetricSpec("compile_s", "minimize", "Warm-up and compilation time, not in latency."),
]

METRICS: dict[str, MetricSpec] = {spec.name: spec for spec in _SPECS}
