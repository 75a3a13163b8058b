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
    # Separate arrivals of text (stream chunks); None: one per token. A server that sends a
    # whole answer in one chunk gives no time per token to measure.
    chunks: int | None = None

    @property
    def ttft_s(self) -> float:
        return self.first_token - self.start

    @property
    def e2e_s(self) -> float:
        return self.end - self.start

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first; None for one-token answers and for
        answers that arrived in one piece."""
        if self.output_tokens < 2 or (self.chunks is not None and self.chunks < 2):
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
    timings: Sequence[RequestTiming],
    *,
    block_size: int = 1,
    steady: int | None = None,
    confidence: float = 0.95,
    latency_slo_ms: float | None = None,
) -> dict[str, float]:
    """Latency percentiles over every measured request; throughput over whole blocks.

    `steady` is how many requests (in order of completion) had ended when measuring stopped:
    the ones still in flight then finish at a falling load, so they count for latency but not
    for throughput. Throughput and its interval come from whole blocks of `block_size`
    completions (autotune.measure.convergence); with less than one block, from the window.
    """
    from autotune.measure.convergence import block_estimate

    if not timings:
        raise ValueError("no measured requests")
    ordered = sorted(timings, key=lambda t: t.end)
    steady_part = ordered[: steady if steady is not None else len(ordered)]
    estimate = block_estimate(steady_part, block_size, confidence=confidence)
    if estimate is not None:
        tokens_per_s, requests_per_s = estimate.tokens_per_s, estimate.requests_per_s
        ci_rel, window_s, blocks = estimate.ci_rel, estimate.window_s, estimate.blocks
    else:
        window_s = max(t.end for t in timings) - min(t.start for t in timings)
        tokens_per_s = sum(t.output_tokens for t in timings) / window_s
        requests_per_s = len(timings) / window_s
        ci_rel, blocks = math.inf, 0
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
        "throughput_output_tokens_per_s": tokens_per_s,
        "throughput_requests_per_s": requests_per_s,
        # Relative half-width of the throughput's interval (NaN: fewer than two blocks).
        "throughput_ci_rel": ci_rel if math.isfinite(ci_rel) else math.nan,
        "throughput_blocks": float(blocks),
        "measured_requests": float(len(timings)),
        "measured_output_tokens": float(sum(t.output_tokens for t in timings)),
        "measured_window_s": window_s,
    }
    if latency_slo_ms is not None:
        # The share of requests within the SLO, at the measured request rate.
        good = sum(1 for value in e2e if value <= latency_slo_ms)
        figures["goodput_requests_per_s"] = requests_per_s * good / len(e2e)
    return figures
