"""Forced answer lengths of a load test: one fixed length, or a seeded spread around it.

With every answer exactly `output_tokens` long, a saturated closed loop can lock into waves:
the requests of one batch start together, decode together, end together and come back
together, so prefill and decode alternate in bursts and each fresh launch settles into its own
pattern. Lengths spread uniformly around the mean
(`workload.output_tokens_spread`) let requests end at different steps, so the load mixes
prefill and decode the way a served workload does. The sequence is seeded and the same for
every trial, so trials still do equal work: request k of any trial asks for the same length.

Servers only. An in-process trial decodes static batches, which turn over all at once and
cannot drift into waves; each of its answers is exactly the mean long (a length per batch
would also recompile a static cache for every new length).
"""

from __future__ import annotations

import random

# Fixed, not the trial's seed: every trial of every study draws the same sequence.
LENGTH_SEED = 20261201


def length_bounds(mean: int, spread: float) -> tuple[int, int]:
    """The shortest and longest answer: `mean` +- round(`mean` * `spread`), at least 1 token."""
    half_width = round(mean * spread)
    return max(1, mean - half_width), mean + half_width


class AnswerLengths:
    """The forced length of each load-test request, in the order the requests start."""

    def __init__(self, mean: int, spread: float = 0.0) -> None:
        if not 0 <= spread < 1:
            raise ValueError(f"spread {spread} is outside [0, 1)")
        self.low, self.high = length_bounds(mean, spread)
        self._rng = random.Random(LENGTH_SEED)

    def next(self) -> int:
        if self.low == self.high:
            return self.low
        return self._rng.randint(self.low, self.high)
