"""No measurement without tokens (issue 56), over generated loads: whatever a load test's
requests timed, its figures are a positive, finite throughput measured inside the load, or a
failed measurement that says why (failure_kind no-tokens), never a throughput of 0, NaN or a
rate of the drain after the load stopped.

Each case is a load of one to forty requests drawn from random.Random(SEED): answers with no
token, tokens that arrive only after the stop (a request cap reached in a burst, an offered
load sent before its first answer), loads shorter than one bin of the token series, long
loads of back-to-back requests, and mixtures of them. They go through
autotune.measure.summary.summarize, the one place a load's timings become a trial's figures.
"""

from __future__ import annotations

import math
import random

import pytest

from autotune.errors import TrialFailure
from autotune.measure.steady import BIN_S
from autotune.measure.summary import NO_TOKENS, summarize
from autotune.measure.timing import RequestTiming

SEED = 5606
LOAD_CASES = 240
# The shapes a case is drawn from, each about as often.
SHAPES = ("silent", "late", "burst", "inside", "long", "mixed")
# Shapes that are never a measurement, and the one that always is; a short load with tokens
# inside it is one unless its steady window (its second half, while unsettled) held none.
FAILED = ("silent", "late", "burst")
MEASURED = ("long",)


def one_request(rng: random.Random, start: float, *, tokens: int, first: float) -> RequestTiming:
    """A request started at `start` whose first token comes `first` seconds later."""
    span = rng.uniform(0.0, 1.0) if tokens > 1 else 0.0
    last = start + first + span
    return RequestTiming(
        start=start,
        first_token=start + first,
        last_token=last,
        end=last + rng.uniform(0.0, 0.05),
        output_tokens=tokens,
    )


def load_case(rng: random.Random, shape: str) -> tuple[list[RequestTiming], float]:
    """A load of `shape`: its request timings and when it stopped (it began at 0)."""
    count = rng.randint(1, 40)
    if shape == "silent":  # answered, without a token
        stop = rng.uniform(0.0, 5.0)
        return [
            one_request(rng, rng.uniform(0, stop), tokens=0, first=0.1) for _ in range(count)
        ], stop
    if shape == "late":  # every token after the stop: the load drained them
        stop = rng.uniform(BIN_S, 3.0)
        late = [
            one_request(rng, rng.uniform(0, stop), tokens=rng.randint(1, 64), first=stop + 0.01)
            for _ in range(count)
        ]
        return late, stop
    if shape == "burst":  # stopped before one whole bin of time
        stop = rng.uniform(0.0, BIN_S * 0.99)
        return [
            one_request(rng, 0.0, tokens=rng.randint(1, 64), first=rng.uniform(0, 0.5))
            for _ in range(count)
        ], stop
    if shape == "inside":  # short, tokens inside: measured (unsettled)
        stop = rng.uniform(0.5, 3.0)
        return [
            one_request(rng, rng.uniform(0, stop / 2), tokens=rng.randint(1, 64), first=0.05)
            for _ in range(count)
        ], stop
    if shape == "long":  # back-to-back requests over tens of seconds: measured
        stop, at, timings = rng.uniform(20.0, 60.0), 0.0, []
        step = rng.uniform(0.2, 1.0)
        while at < stop:
            timings.append(one_request(rng, at, tokens=rng.randint(8, 32), first=0.05))
            at += step
        return timings, stop
    stop = rng.uniform(0.0, 5.0)  # mixed: any of the above at once
    return [
        one_request(
            rng, rng.uniform(0, stop), tokens=rng.choice([0, 1, 9]), first=rng.uniform(0, 6)
        )
        for _ in range(count)
    ], stop


def cases() -> list[tuple[str, list[RequestTiming], float]]:
    rng = random.Random(SEED)
    generated = []
    for index in range(LOAD_CASES):
        shape = SHAPES[index % len(SHAPES)]
        timings, stop = load_case(rng, shape)
        generated.append((shape, timings, stop))
    return generated


CASES = cases()


def test_the_generated_loads_cover_every_shape() -> None:
    assert len(CASES) == LOAD_CASES
    assert {shape for shape, _, _ in CASES} == set(SHAPES)


@pytest.mark.parametrize(
    ("shape", "timings", "stop"), CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)]
)
def test_a_load_is_a_positive_throughput_or_a_failure_with_its_reason(
    shape: str, timings: list[RequestTiming], stop: float
) -> None:
    try:
        figures = summarize(timings, load_start=0.0, load_stop=stop)
    except TrialFailure as failure:
        assert failure.kind == NO_TOKENS, failure
        assert "no throughput to record" in failure.reason and "\n" not in failure.reason
        assert shape not in MEASURED, (shape, failure.reason)
        if shape in ("late", "burst"):
            assert "never settled within its cap" in failure.reason, failure.reason
        return
    assert shape not in FAILED, (shape, figures)
    rate = figures["throughput_output_tokens_per_s"]
    assert math.isfinite(rate) and rate > 0, (shape, figures)
    # Measured inside the load: no more tokens than arrived before the stop, over a window
    # that lies within it.
    assert 0 < figures["measured_window_s"] <= stop + 1e-9, (shape, figures)
    inside = sum(t.output_tokens for t in timings if t.first_token < stop)
    assert figures["measured_output_tokens"] <= inside + 1e-6, (shape, figures)
