"""Measuring at steady state: the warm-up cut, streamed tokens, honest intervals, the stop rule."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time

import numpy as np
import pytest

from autotune.client.load import LiveTokens, closed_loop_until
from autotune.measure.convergence import (
    CONVERGED,
    MAX_REQUESTS,
    MAX_SECONDS,
    TRAIL_EVERY_S,
    LoadSnapshot,
    SteadyRule,
    StopRuleMonitor,
)
from autotune.measure.steady import (
    BIN_S,
    MIN_BATCHES,
    TESTED_BATCHES,
    batch_means,
    fixed_edges,
    steady_state,
    token_series,
)
from autotune.measure.summary import summarize
from autotune.measure.timing import RequestTiming
from autotune.records import Prompt, Reply

SECONDS = np.arange(int(120 / BIN_S)) * BIN_S


def poisson(rate_per_s: np.ndarray, seed: int = 0) -> np.ndarray:
    """Tokens per bin of a load whose rate is `rate_per_s` at each bin."""
    return np.random.default_rng(seed).poisson(rate_per_s * BIN_S).astype(float)


def waves(steady: float, *, slow_s: float = 0.0, period_s: float = 4.4) -> np.ndarray:
    """A saturated server: prefill/decode waves of `period_s` around `steady` tok/s, after a
    start `slow_s` long at a third of it."""
    rate = steady * (1 + 0.4 * np.sin(2 * np.pi * SECONDS / period_s))
    return np.where(slow_s > SECONDS, steady / 3, rate)


def wave_ends(period_s: float = 4.4, in_flight: int = 64) -> list[float]:
    """When its requests complete: the whole batch at the end of every wave."""
    last = int(SECONDS[-1] / period_s)
    return [k * period_s for k in range(1, last + 1) for _ in range(in_flight)]


# --- where the warm-up ends ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_planted_slow_start_is_cut_off_and_the_steady_rate_remains(seed: int) -> None:
    series = poisson(waves(2500.0, slow_s=12.0), seed)
    estimate = steady_state(
        series, batch_s=9.0, min_warmup_s=4.0, confidence=0.95, ends_s=wave_ends()
    )
    assert estimate is not None and estimate.settled
    assert 11.0 <= estimate.warmup_s <= 14.0
    assert estimate.tokens_per_s == pytest.approx(2500.0, rel=0.02)
    # Counting the slow start would have missed by far more than the interval.
    whole = series.sum() / (len(series) * BIN_S)
    assert abs(whole - 2500.0) / 2500.0 > 3 * estimate.ci_rel


def test_the_warmup_lasts_at_least_one_turnover_of_the_batch() -> None:
    estimate = steady_state(
        poisson(waves(2500.0)), batch_s=9.0, min_warmup_s=7.3, confidence=0.95, ends_s=wave_ends()
    )
    assert estimate is not None
    assert estimate.warmup_s == pytest.approx(7.3, abs=BIN_S)


def test_a_rate_still_rising_has_not_settled() -> None:
    series = poisson(800.0 + 15.0 * SECONDS)
    estimate = steady_state(series, batch_s=5.0, min_warmup_s=0.0, confidence=0.95)
    assert estimate is not None
    assert not estimate.settled
    assert estimate.warmup_s <= SECONDS[-1] / 2 + 1  # never more than half the run is cut


# --- tokens counted when they arrive ------------------------------------------------------------


def test_streamed_tokens_count_when_they_arrive_not_when_their_request_ends() -> None:
    # One request streams five chunks at 0.1..0.9 s but ends at 3 s; usage says 10 tokens.
    stamps = (0.1, 0.3, 0.5, 0.7, 0.9)
    streamed = RequestTiming(0.0, 0.1, 0.9, 3.0, 10, chunks=5, chunk_times=stamps)
    series = token_series([streamed], start=0.0, end=1.0)
    assert len(series) == 20
    assert series.sum() == pytest.approx(10.0)  # usage tokens, spread over the chunks
    assert series[2] == pytest.approx(2.0)  # the chunk at 0.1 s carries two tokens
    assert token_series([streamed], start=0.0, end=0.5).sum() == pytest.approx(4.0)


def test_in_process_tokens_are_spread_over_the_decoding_steps() -> None:
    # A static batch: first token at 1 s, the 11th at 2 s, the batch returns at 2.5 s.
    timing = RequestTiming(0.0, 1.0, 2.0, 2.5, 11)
    series = token_series([timing], start=0.0, end=3.0)
    assert series[: int(1.0 / BIN_S)].sum() == 0  # nothing while prefilling
    assert series.sum() == pytest.approx(11.0)
    assert series[int(2.0 / BIN_S) + 1 :].sum() == 0  # nothing after the last step


def test_summary_counts_the_steady_window_and_latency_of_requests_inside_it() -> None:
    # 4 requests in flight, each 20 tokens over 1 s, back to back for 40 s, the first 10 s
    # three times slower (each request then takes 3 s).
    timings, now = [], [0.0] * 4
    for slot in range(4):
        while now[slot] < 40.0:
            start = now[slot]
            length = 3.0 if start < 10.0 else 1.0
            stamps = tuple(start + length * (k + 1) / 20 for k in range(20))
            timings.append(RequestTiming(start, stamps[0], stamps[-1], stamps[-1], 20, 20, stamps))
            now[slot] = stamps[-1] + 0.001 * slot
    figures = summarize(timings, load_start=0.0, load_stop=40.0, min_warmup_s=3.0)
    assert figures["load_warmup_s"] >= 10.0
    assert figures["throughput_output_tokens_per_s"] == pytest.approx(80.0, rel=0.02)
    assert figures["e2e_latency_p95_ms"] == pytest.approx(1000.0, rel=0.01)  # no slow request
    assert figures["throughput_requests_per_s"] == pytest.approx(4.0, rel=0.05)
    assert figures["output_tokens_per_request"] == 20
    assert figures["warmup_settled"] == 1.0


# --- intervals that the next launch falls inside ------------------------------------------------


def correlated_rates(n: int, phi: float, seed: int) -> np.ndarray:
    """n batch rates around 1000 tok/s, AR(1) with coefficient `phi`."""
    rng = np.random.default_rng(seed)
    values = np.zeros(n)
    for i in range(1, n):
        values[i] = phi * values[i - 1] + rng.normal(0.0, 30.0)
    return 1000.0 + values


def test_the_interval_widens_when_neighbouring_windows_correlate() -> None:
    # The same batch rates in their correlated order and shuffled: over 100 draws, the
    # correlated order is always merged into longer batches and gets a wider interval; the
    # shuffled one is merged only by the test's false alarms.
    per_bin = 20  # a batch of 1 s in 0.05 s bins, its tokens spread evenly
    false_alarms = 0
    for seed in range(100):
        rates = correlated_rates(64, 0.8, seed)
        shuffled = np.random.default_rng(seed).permutation(rates)
        edges = fixed_edges(64 * per_bin, per_bin)
        correlated = batch_means(
            np.repeat(rates * BIN_S, per_bin), edges=edges, bin_s=BIN_S, confidence=0.95
        )
        independent = batch_means(
            np.repeat(shuffled * BIN_S, per_bin), edges=edges, bin_s=BIN_S, confidence=0.95
        )
        assert correlated.batch_s > 1.0
        assert correlated.ci_rel > 1.3 * independent.ci_rel
        false_alarms += independent.batch_s > 1.0
    assert false_alarms <= 20


def test_intervals_cover_the_true_rate_as_often_as_they_claim() -> None:
    # 200 fresh "launches" of a saturated server with waves and a slow start, each cut and
    # measured over 120 s: the 95% intervals must hold the true rate about 95% of the time.
    covered = 0
    runs = 200
    for seed in range(runs):
        period = 4.0 + (seed % 5) * 0.3
        series = poisson(waves(2400.0, slow_s=8.0, period_s=period), seed)
        estimate = steady_state(
            series, batch_s=9.0, min_warmup_s=5.0, confidence=0.95, ends_s=wave_ends(period)
        )
        assert estimate is not None
        covered += estimate.ci_low <= 2400.0 <= estimate.ci_high
    assert covered / runs >= 0.9


# --- the stop rule ------------------------------------------------------------------------------


def rule(**values: float) -> SteadyRule:
    defaults = dict(
        target_ci_rel=0.03, confidence=0.95, max_measure_s=100.0, max_load_s=110.0,
        max_requests=10_000,
    )  # fmt: skip
    return SteadyRule(**{**defaults, **values})  # type: ignore[arg-type]


def snapshot(series: np.ndarray, upto_s: float, *, turnover: float | None = 5.0) -> LoadSnapshot:
    bins = int(upto_s / BIN_S)
    return LoadSnapshot(
        series=series[:bins],
        elapsed_s=upto_s,
        completed=int(upto_s * 10),
        e2e_median_s=4.5,
        min_warmup_s=turnover,
    )


def test_the_monitor_holds_the_warm_up_to_the_turnover_and_the_first_requests() -> None:
    """The one monitor every load loop uses: its floor is the later of the batch's turnover
    and the warm-up requests' completion, and what the load records is 0 until the turnover;
    before the turnover it never stops converged; it keeps a trail entry every TRAIL_EVERY_S
    and shows each to the running estimate."""
    series = poisson(waves(2500.0, slow_s=12.0))
    ends = [100.0 + 0.5 * k for k in range(1, 400)]  # a request every 0.5 s

    def timing(end: float) -> RequestTiming:
        return RequestTiming(end - 4.5, end - 4.0, end, end, 128)

    for turnover, floor in ((101.0, 2.0), (107.5, 7.5)):  # the 4th request ends at 2 s
        early = StopRuleMonitor(rule(), start=100.0, min_requests=4)
        for end in ends[:10]:
            early.completed(timing(end))
        assert early.warmup_floor_s is None and early.min_warmup_s == 0.0
        early.turned_over(turnover)
        early.turned_over(150.0)  # the first call counts
        assert early.warmup_floor_s == early.min_warmup_s == floor
    shown: list[dict[str, object]] = []
    monitor = StopRuleMonitor(rule(), start=100.0, min_requests=4, on_estimate=shown.append)
    stops, reported = [], 0
    for second in range(1, 100):
        while reported < len(ends) and ends[reported] <= 100.0 + second:
            monitor.completed(timing(ends[reported]))
            reported += 1
        if second == 40:
            monitor.turned_over(105.0)
        reason = monitor.look(now=100.0 + second, series=series[: int(second / BIN_S)])
        if reason is not None:
            stops.append((second, reason))
            break
    assert stops and stops[0][0] >= 40 and stops[0][1] == CONVERGED, stops
    assert monitor.min_warmup_s == 5.0
    assert len(monitor.trail) == len(shown) >= stops[0][0] // TRAIL_EVERY_S
    assert monitor.trail[-1]["stop"] == CONVERGED and shown[-1] == monitor.trail[-1]


def test_the_rule_waits_for_the_first_turnover_and_a_settled_rate_then_stops_converged() -> None:
    series = poisson(waves(2500.0, slow_s=12.0))
    assert rule().reason_to_stop(snapshot(series, 30.0, turnover=None)) is None
    assert rule().reason_to_stop(snapshot(series, 20.0)) is None  # not yet 8 batches
    stops = [t for t in np.arange(20.0, 110.0, 1.0) if rule().reason_to_stop(snapshot(series, t))]
    assert stops, "a steady series must converge within the cap"
    first = stops[0]
    assert rule().reason_to_stop(snapshot(series, first)) == CONVERGED
    estimate = snapshot(series, first).estimate(0.95)
    assert estimate is not None
    assert estimate.batches >= TESTED_BATCHES and estimate.ci_rel <= 0.03


def test_the_rule_caps_a_rate_that_never_settles_and_a_window_that_never_narrows() -> None:
    rising = poisson(800.0 + 15.0 * SECONDS)
    assert rule().reason_to_stop(snapshot(rising, 100.0)) is None
    assert rule().reason_to_stop(snapshot(rising, 110.0)) == MAX_SECONDS
    noisy = poisson(waves(2500.0) * np.random.default_rng(9).uniform(0.3, 1.7, len(SECONDS)))
    capped = rule(target_ci_rel=0.001, max_measure_s=40.0)
    stops = [t for t in np.arange(20.0, 110.0, 1.0) if capped.reason_to_stop(snapshot(noisy, t))]
    assert stops and capped.reason_to_stop(snapshot(noisy, stops[0])) == MAX_SECONDS
    assert 40.0 <= stops[0] <= 50.0  # 40 s of window after the warm-up
    assert rule(max_requests=100).reason_to_stop(snapshot(noisy, 10.0)) == MAX_REQUESTS


def test_the_window_cap_waits_for_an_interval_within_the_load_cap() -> None:
    """Requests of 5.5 s make 11 s batches: at the 40 s window cap the window holds three
    batch means and no interval, so the load goes on (into the warm-up time it did not use)
    until a fourth gives one; the load cap still ends it (issue 12's FP8 trials on the H200
    stopped with three)."""
    series = poisson(waves(1400.0, period_s=11.0))

    def slow(upto_s: float) -> LoadSnapshot:
        return dataclasses.replace(snapshot(series, upto_s, turnover=5.5), e2e_median_s=5.5)

    capped = rule(target_ci_rel=0.001, max_measure_s=40.0, max_load_s=90.0)
    at_cap = slow(46.0).estimate(0.95)
    assert at_cap is not None and at_cap.window_s >= 40.0 and at_cap.batches < MIN_BATCHES
    assert capped.reason_to_stop(slow(46.0)) is None
    stops = [t for t in np.arange(46.0, 90.0, 1.0) if capped.reason_to_stop(slow(t))]
    assert stops and capped.reason_to_stop(slow(stops[0])) == MAX_SECONDS
    stopped = slow(stops[0]).estimate(0.95)
    assert stopped is not None and stopped.batches >= MIN_BATCHES
    assert math.isfinite(stopped.ci_rel)
    # No interval before the load cap: the load cap ends it all the same.
    assert rule(max_measure_s=40.0, max_load_s=47.0).reason_to_stop(slow(47.0)) == MAX_SECONDS


# --- a real closed loop -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("tokens_per_chunk", [1, 16])
def test_closed_loop_warms_up_at_its_own_concurrency_and_discards_a_slow_start(
    tokens_per_chunk: int,
) -> None:
    """Four requests in flight against a fake engine that streams slowly for its first 1.5 s:
    the load never drops below four, the rule waits until the rate has settled, and the
    recorded figure is the fast rate; also where each chunk carries 16 tokens, as a busy
    server's do."""
    live = LiveTokens()
    in_flight = most = 0
    began = time.perf_counter()
    chunks, fast_delay, slow_delay = 8, 0.004, 0.016

    async def send(prompt: Prompt) -> Reply:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        start = time.perf_counter()
        stamps = []
        for _ in range(chunks):
            slow = time.perf_counter() - began < 1.5
            await asyncio.sleep(slow_delay if slow else fast_delay)
            stamps.append(time.perf_counter())
            live.add(stamps[-1])
        in_flight -= 1
        end = stamps[-1]
        tokens = chunks * tokens_per_chunk
        timing = RequestTiming(start, stamps[0], end, end, tokens, chunks, tuple(stamps))
        return Reply(prompt.item_id, "x", timing)

    prompts = [Prompt(f"i{n}", None, "p") for n in range(3)]  # type: ignore[arg-type]
    steady_rule = rule(target_ci_rel=0.1, max_measure_s=20.0, max_load_s=25.0)
    run = asyncio.run(closed_loop_until(send, prompts, 4, steady_rule, live=live))
    assert most == 4
    assert run.stop_reason == CONVERGED
    # The trail says what the rule saw: the last entry is the stop, with the interval it met.
    assert run.trail[-1]["stop"] == CONVERGED
    assert run.trail[-1]["ci_rel"] is not None and run.trail[-1]["ci_rel"] <= 0.1
    assert [entry["stop"] for entry in run.trail[:-1]] == [None] * (len(run.trail) - 1)
    assert {r.item_id for r in run.replies} == {"i0", "i1", "i2"}  # the workload cycles
    figures = summarize(
        [r.timing for r in run.replies],
        load_start=run.start,
        load_stop=run.stop,
        min_warmup_s=run.min_warmup_s,
    )
    assert figures["load_warmup_s"] >= 1.4
    # Tokens/s with no scheduling overhead.
    ideal = 4 * chunks * tokens_per_chunk / (chunks * fast_delay)
    assert 0.4 * ideal < figures["throughput_output_tokens_per_s"] < ideal
    assert math.isfinite(figures["throughput_ci_rel"])


def test_a_slow_climb_that_mser_misses_is_cut_and_a_falling_rate_never_settles() -> None:
    # 75% of the steady rate climbing to 100% over 30 s, under the waves' noise.
    climb = np.clip(0.75 + 0.25 * SECONDS / 30.0, None, 1.0)
    cuts = []
    for seed in range(10):
        series = poisson(waves(2500.0, period_s=4.0) * climb, seed)
        estimate = steady_state(
            series, batch_s=8.0, min_warmup_s=4.0, confidence=0.95, ends_s=wave_ends(4.0)
        )
        assert estimate is not None and estimate.settled
        cuts.append(estimate.warmup_s)
        assert estimate.tokens_per_s == pytest.approx(2500.0, rel=0.015)
    assert np.median(cuts) >= 12.0
    # Losing 10% over two minutes: however long it runs, that rate is not steady.
    falling = poisson(waves(2500.0, period_s=4.0) * (1 - 0.1 * SECONDS / 120.0))
    estimate = steady_state(
        falling, batch_s=8.0, min_warmup_s=4.0, confidence=0.95, ends_s=wave_ends(4.0)
    )
    assert estimate is not None and not estimate.settled


def test_live_tokens_weigh_coalesced_chunks_by_the_usage_they_carried() -> None:
    """A busy server sends a 128-token answer in a handful of chunks: the live series counts
    tokens (as the recorded figure does), not chunks, once each request completes, and
    estimates the chunks still in flight from the completed ones."""
    live = LiveTokens()
    live.begin(0.0)
    rng = np.random.default_rng(3)
    timings = []
    for n in range(40):
        chunks = int(rng.integers(3, 9))  # 128 tokens in 3-8 events
        stamps = tuple(sorted(rng.uniform(n * 0.25, n * 0.25 + 2.0, chunks)))
        for at in stamps:
            live.add(at)
        timing = RequestTiming(n * 0.25, stamps[0], stamps[-1], stamps[-1], 128, chunks, stamps)
        live.settle(timing)
        timings.append(timing)
    end = 40 * 0.25 + 2.5
    series = live.series(end)
    assert series.sum() == pytest.approx(40 * 128)
    exact = token_series(timings, start=0.0, end=end)
    assert np.allclose(series, exact[: len(series)])
    # One more request in flight: its 4 chunks count as the completed mean per chunk.
    per_chunk = 40 * 128 / sum(t.chunks or 0 for t in timings)
    for at in (11.0, 11.1, 11.2, 11.3):
        live.add(at)
    assert live.series(12.0).sum() == pytest.approx(40 * 128 + 4 * per_chunk)


def test_a_load_the_client_ends_at_its_request_cap_keeps_the_stop_in_its_trail() -> None:
    """The HTTP client stops starting requests at its cap, before the rule looks again: the
    trail's last entry and the last running estimate (what the study stores while a trial
    measures) still say why it stopped. Seen under load in CI: a contender ran to its 8,192
    requests and its stored estimate said nothing about it."""
    live = LiveTokens()
    shown: list[dict] = []

    async def send(prompt: Prompt) -> Reply:
        start = time.perf_counter()
        stamps = []
        for _ in range(4):
            await asyncio.sleep(0.1)  # slower than the rule's checks: some still in flight
            stamps.append(time.perf_counter())
            live.add(stamps[-1])
        end = stamps[-1]
        return Reply(
            prompt.item_id, "x", RequestTiming(start, stamps[0], end, end, 4, 4, tuple(stamps))
        )

    prompts = [Prompt(f"i{n}", None, "p") for n in range(3)]  # type: ignore[arg-type]
    # An interval it cannot reach in 12 requests: only the cap on work ends it.
    capped = rule(target_ci_rel=1e-6, max_requests=12)
    run = asyncio.run(
        closed_loop_until(send, prompts, 4, capped, live=live, on_estimate=shown.append)
    )
    assert run.stop_reason == MAX_REQUESTS
    assert run.trail[-1]["stop"] == MAX_REQUESTS
    assert [entry["stop"] for entry in run.trail[:-1]] == [None] * (len(run.trail) - 1)
    assert shown[-1]["stop"] == MAX_REQUESTS
    assert len(run.replies) == 12  # those in flight at the cap drained


def test_a_load_its_cap_stopped_after_few_long_batches_still_gets_an_interval() -> None:
    # An H100 study's baseline stopped at its cap with two batches of 10.7 s and no interval,
    # so its gain printed "(no interval)". The load's figures (`enough_batches`) take shorter
    # batches from the same window; the stop rule's own estimate does not.
    covered, runs = 0, 100
    for seed in range(runs):
        series = poisson(waves(2400.0, slow_s=8.0, period_s=5.0)[: int(40 / BIN_S)], seed)
        ends = [end for end in wave_ends(5.0) if end <= 40.0]
        running, ended = (
            steady_state(
                series,
                batch_s=10.7,
                min_warmup_s=5.0,
                confidence=0.95,
                ends_s=ends,
                enough_batches=end,
            )
            for end in (False, True)
        )
        assert running is not None and ended is not None
        assert running.batches < MIN_BATCHES and math.isinf(running.ci_rel)
        assert ended.batches >= MIN_BATCHES and math.isfinite(ended.ci_rel)
        assert ended.tokens_per_s == running.tokens_per_s  # the same window, the same rate
        covered += ended.ci_low <= 2400.0 <= ended.ci_high
    assert covered / runs >= 0.9
