"""Per-request timings and the latency/throughput figures derived from them.

In-process engines and the HTTP client both record one RequestTiming per measured request, so
every runner reports the same figures with the same names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class RequestTiming:
    """Instants (seconds, one monotonic clock) of one request.

    `end` is when the client holds the whole answer; for a static batch that is when the batch
    returns, which can be later than `last_token` of a short answer in it.
    """

    start: float
    first_token: float
    last_token: float
    end: float
    output_tokens: int

    @property
    def ttft_s(self) -> float:
        return self.first_token - self.start

    @property
    def e2e_s(self) -> float:
        return self.end - self.start

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first; None for one-token answers."""
        if self.output_tokens < 2:
            return None
        return (self.last_token - self.first_token) / (self.output_tokens - 1)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), as numpy's default method computes it."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(
    timings: Sequence[RequestTiming], *, latency_slo_ms: float | None = None
) -> dict[str, float]:
    """Latency percentiles and throughput over the measured window, in ms / per-second units."""
    if not timings:
        raise ValueError("no measured requests")
    window_s = max(t.end for t in timings) - min(t.start for t in timings)
    tokens = sum(t.output_tokens for t in timings)
    ttft = [t.ttft_s * 1000 for t in timings]
    e2e = [t.e2e_s * 1000 for t in timings]
    tpot = [t.tpot_s * 1000 for t in timings if t.tpot_s is not None]
    figures = {
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p95_ms": percentile(ttft, 95),
        "tpot_p50_ms": percentile(tpot, 50),
        "tpot_p95_ms": percentile(tpot, 95),
        "e2e_latency_p50_ms": percentile(e2e, 50),
        "e2e_latency_p95_ms": percentile(e2e, 95),
        "throughput_output_tokens_per_s": tokens / window_s,
        "throughput_requests_per_s": len(timings) / window_s,
        "measured_requests": float(len(timings)),
        "measured_output_tokens": float(tokens),
        "measured_window_s": window_s,
    }
    if latency_slo_ms is not None:
        good = sum(1 for value in e2e if value <= latency_slo_ms)
        figures["goodput_requests_per_s"] = good / window_s
    return figures
