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


# The ranges a stored figure must lie in (autotune.records.checks): every figure is 0 or more,
# and at most these. No model on any hardware comes within three orders of 1e9 tokens or
# requests per second; a load test is capped at a day (workload.max_load_s), so no latency
# reaches a day; 2**30 MiB is a pebibyte, past any host's memory; a start-up or warm-up longer
# than a week is a trial that would have been timed out.
MAX_RATE_PER_S = 1e9
MAX_LATENCY_MS = 86_400_000.0
MAX_MEMORY_MIB = float(2**30)
MAX_PHASE_S = 604_800.0


@dataclass(frozen=True)
class MetricSpec:
    name: str
    direction: Direction
    description: str
    high: float = MAX_RATE_PER_S  # the largest value a stored figure may hold (the least is 0)
    # NaN stands for "not measured" (no TPOT of one-token answers, no memory of an endpoint).
    may_be_unknown: bool = False


_SPECS = [
    MetricSpec(THROUGHPUT, "maximize", "Output tokens per second, all requests."),
    MetricSpec("throughput_requests_per_s", "maximize", "Completed requests per second."),
    MetricSpec(
        "goodput_requests_per_s", "maximize", "Requests per second meeting the latency SLO."
    ),
    *(
        MetricSpec(name, "minimize", description, MAX_LATENCY_MS, may_be_unknown=True)
        for name, description in [
            ("ttft_p50_ms", "Time to first token, median."),
            ("ttft_p95_ms", "Time to first token, 95th percentile."),
            ("tpot_p50_ms", "Time per output token after the first, median."),
            ("tpot_p95_ms", "Time per output token after the first, 95th percentile."),
            ("e2e_latency_p50_ms", "Request end-to-end latency, median."),
            ("e2e_latency_p95_ms", "Request end-to-end latency, 95th percentile."),
        ]
    ),
    MetricSpec(
        "peak_memory_mib",
        "minimize",
        "Peak memory of the engine (GPU, else process RSS).",
        MAX_MEMORY_MIB,
        may_be_unknown=True,
    ),
    MetricSpec("accuracy", "maximize", "Mean item score on the evaluation set (0 to 1).", 1.0),
    MetricSpec(
        "startup_s",
        "minimize",
        "Model load / server start-up time, not in latency.",
        MAX_PHASE_S,
        may_be_unknown=True,
    ),
    MetricSpec(
        "compile_s",
        "minimize",
        "Warm-up and compilation time, not in latency.",
        MAX_PHASE_S,
        may_be_unknown=True,
    ),
]

METRICS: dict[str, MetricSpec] = {spec.name: spec for spec in _SPECS}
