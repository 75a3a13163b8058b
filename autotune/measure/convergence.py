"""Measuring until throughput is known: batch means, their interval, and when to stop.

Requests are measured in passes of `block_size` completions (one pass over the workload: the
same requests every time). Passes are grouped into at most MAX_BLOCKS equal blocks, each
block's throughput is its tokens over the time since the previous block ended, and the mean's
Student-t interval says how well the throughput is known: the fixed-number-of-batch-means
method of simulation output analysis. Keeping the number of blocks fixed makes each block
longer as measuring goes on, so a load whose rate swings over several seconds (a server
at saturation prefills a wave of requests, then decodes) still gives blocks that are close to
independent. A trial stops once the interval lies within +-`target_ci_rel` of the value, and
never before two passes and its minimum number of requests; `max_requests` and `max_seconds`
bound it.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

from autotune.measure.timing import RequestTiming

# Blocks the passes are grouped into (fewer while there are fewer passes).
MAX_BLOCKS = 10


@dataclass(frozen=True)
class ThroughputEstimate:
    """Throughput over whole blocks, with the relative half-width of its interval."""

    tokens_per_s: float
    requests_per_s: float
    ci_rel: float  # half-width / value; inf with fewer than two blocks
    blocks: int
    requests: int
    window_s: float

    @property
    def ci_low(self) -> float:
        return self.tokens_per_s * max(0.0, 1.0 - self.ci_rel)

    @property
    def ci_high(self) -> float:
        return self.tokens_per_s * (1.0 + self.ci_rel)


def block_estimate(
    timings: Sequence[RequestTiming], block_size: int, *, confidence: float = 0.95
) -> ThroughputEstimate | None:
    """The estimate over the whole passes of `block_size` requests in `timings`, grouped into
    at most MAX_BLOCKS blocks; None before the first pass ends."""
    if block_size < 1 or len(timings) < block_size:
        return None
    ordered = sorted(timings, key=lambda t: t.end)
    passes = len(ordered) // block_size
    blocks = min(passes, MAX_BLOCKS)
    # Block i holds passes [i*P/k, (i+1)*P/k): every whole pass is used, block sizes differ
    # by one pass at most.
    bounds = [index * passes // blocks * block_size for index in range(blocks + 1)]
    begin = min(t.start for t in timings)
    previous_end = begin
    rates: list[float] = []
    tokens = 0
    for low, high in itertools.pairwise(bounds):
        block = ordered[low:high]
        end = block[-1].end
        block_tokens = sum(t.output_tokens for t in block)
        rates.append(block_tokens / max(end - previous_end, 1e-9))
        tokens += block_tokens
        previous_end = end
    window = max(previous_end - begin, 1e-9)
    return ThroughputEstimate(
        tokens_per_s=tokens / window,
        requests_per_s=bounds[-1] / window,
        ci_rel=_relative_half_width(rates, confidence),
        blocks=blocks,
        requests=bounds[-1],
        window_s=window,
    )


def _relative_half_width(samples: list[float], confidence: float) -> float:
    if len(samples) < 2:
        return math.inf
    mean = statistics.fmean(samples)
    if mean <= 0:
        return math.inf
    spread = statistics.stdev(samples) / math.sqrt(len(samples))
    quantile = float(stats.t.ppf(0.5 + confidence / 2, df=len(samples) - 1))
    return quantile * spread / mean


@dataclass(frozen=True)
class StopRule:
    """When a load test has measured enough (see the module docstring)."""

    block_size: int
    min_requests: int
    max_requests: int
    max_seconds: float
    target_ci_rel: float
    confidence: float = 0.95

    def reason_to_stop(self, timings: Sequence[RequestTiming], elapsed_s: float) -> str | None:
        """ "converged", "max_requests" or "max_seconds" once measuring may end; else None."""
        done = len(timings)
        if done >= self.max_requests:
            return "max_requests"
        if done < max(self.min_requests, 2 * self.block_size):
            # The minimum is measured even past max_seconds: a figure from fewer requests
            # than two full batches would not describe the configuration at all.
            return None
        estimate = block_estimate(timings, self.block_size, confidence=self.confidence)
        if estimate is not None and estimate.ci_rel <= self.target_ci_rel:
            return "converged"
        if elapsed_s >= self.max_seconds:
            return "max_seconds"
        return None
