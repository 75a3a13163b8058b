"""Measuring until throughput is known: batch means, the interval, and the stop rule."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from autotune.client.chat import ChatPrompt, ChatReply
from autotune.client.load import closed_loop_until
from autotune.measure.convergence import MAX_BLOCKS, StopRule, block_estimate
from autotune.measure.timing import RequestTiming, summarize


def batches(rates: list[float], *, size: int = 4, tokens: int = 10) -> list[RequestTiming]:
    """Static batches back to back, batch i producing size*tokens tokens at rates[i] tok/s."""
    timings, now = [], 0.0
    for rate in rates:
        duration = size * tokens / rate
        for _ in range(size):
            timings.append(RequestTiming(now, now + 0.01, now + duration, now + duration, tokens))
        now += duration
    return timings


def test_steady_batches_give_the_rate_and_a_narrow_interval() -> None:
    estimate = block_estimate(batches([100.0] * 6), 4)
    assert estimate is not None
    assert estimate.tokens_per_s == pytest.approx(100.0)
    assert estimate.ci_rel == pytest.approx(0.0, abs=1e-9)
    assert estimate.blocks == 6 and estimate.requests == 24


def test_noisy_batches_give_a_wide_interval_that_narrows_with_more_blocks() -> None:
    rng = random.Random(0)
    rates = [100 * (1 + rng.uniform(-0.3, 0.3)) for _ in range(64)]
    few = block_estimate(batches(rates[:4]), 4)
    many = block_estimate(batches(rates), 4)
    assert few is not None and many is not None
    assert few.ci_rel > 0.1
    assert many.ci_rel < few.ci_rel
    assert few.ci_low < few.tokens_per_s < few.ci_high


def test_one_block_has_no_interval_and_less_than_a_block_no_estimate() -> None:
    one = block_estimate(batches([100.0]), 4)
    assert one is not None and math.isinf(one.ci_rel)
    assert block_estimate(batches([100.0])[:3], 4) is None


def rule(**kw: float) -> StopRule:
    values = dict(
        block_size=4,
        min_requests=8,
        max_requests=400,
        max_seconds=60.0,
        target_ci_rel=0.03,
        confidence=0.95,
    )
    values.update(kw)
    return StopRule(**values)  # type: ignore[arg-type]


def test_stop_rule_needs_two_blocks_and_the_minimum_then_converges() -> None:
    steady = batches([100.0] * 10)
    assert rule().reason_to_stop(steady[:4], 0.0) is None  # one block
    assert rule(min_requests=16).reason_to_stop(steady[:12], 0.0) is None  # under the minimum
    assert rule().reason_to_stop(steady[:8], 0.0) == "converged"


def test_stop_rule_bounds_a_measurement_that_never_converges() -> None:
    rng = random.Random(1)
    noisy = batches([100 * (1 + rng.uniform(-0.9, 0.9)) for _ in range(100)])
    assert rule().reason_to_stop(noisy[:40], 1.0) is None
    assert rule().reason_to_stop(noisy[:40], 61.0) == "max_seconds"
    assert rule(max_requests=40).reason_to_stop(noisy[:40], 1.0) == "max_requests"
    # The minimum is measured even past max_seconds.
    assert rule(min_requests=48).reason_to_stop(noisy[:40], 61.0) is None


def test_summary_counts_throughput_over_the_steady_part_only() -> None:
    steady = batches([100.0] * 4)
    end = steady[-1].end
    # A drained request that ends long after: counted for latency, not for throughput.
    drained = RequestTiming(end - 0.5, end - 0.4, end + 9.0, end + 9.0, 10)
    figures = summarize([*steady, drained], block_size=4, steady=16)
    assert figures["throughput_output_tokens_per_s"] == pytest.approx(100.0)
    assert figures["throughput_ci_rel"] == pytest.approx(0.0, abs=1e-9)
    assert figures["measured_requests"] == 17
    assert figures["e2e_latency_p95_ms"] > 1000  # the drained request is in the latency


def test_closed_loop_keeps_the_concurrency_until_the_rule_stops_it() -> None:
    in_flight = 0
    most = 0

    async def send(prompt: ChatPrompt) -> ChatReply:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        start = asyncio.get_running_loop().time()
        await asyncio.sleep(0.002)
        in_flight -= 1
        end = asyncio.get_running_loop().time()
        return ChatReply(prompt.item_id, "x", RequestTiming(start, end, end, end, 5))

    prompts = [ChatPrompt(f"i{n}", None, "p") for n in range(3)]  # type: ignore[arg-type]
    replies, steady, reason = asyncio.run(
        closed_loop_until(send, prompts, 4, rule(max_requests=40, target_ci_rel=1e-9))
    )
    assert most == 4
    assert reason == "max_requests"
    assert len(replies) == 40 == steady
    assert {r.item_id for r in replies} == {"i0", "i1", "i2"}  # the workload cycles


def test_passes_are_grouped_into_at_most_ten_blocks_using_every_pass() -> None:
    estimate = block_estimate(batches([100.0] * 19, size=4), 4)
    assert estimate is not None
    assert estimate.blocks == MAX_BLOCKS
    assert estimate.requests == 19 * 4  # no pass left out
    assert estimate.tokens_per_s == pytest.approx(100.0)


def test_a_rate_swinging_within_blocks_averages_out_as_blocks_grow() -> None:
    # A server at saturation alternates slow and fast passes (prefill waves, then decode):
    # one pass per block sees the swing, ten passes per block average it out.
    swinging = batches([60.0, 140.0] * 50, size=4)
    short = block_estimate(swinging[:40], 4)
    long = block_estimate(swinging, 4)
    assert short is not None and long is not None
    assert short.ci_rel > 0.2
    assert long.ci_rel < 0.03
