"""Per-request timings, and percentiles of them.

In-process engines and the HTTP client both record one RequestTiming per measured request, so
every runner reports the same figures with the same names (autotune.measure.summary).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


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
    # When each chunk arrived (streamed answers): throughput counts tokens when they arrive
    # (autotune.measure.steady). Empty in-process, where tokens come at decoding steps.
    chunk_times: tuple[float, ...] = ()

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

    def to_dict(self) -> dict[str, Any]:
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
