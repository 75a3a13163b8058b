"""The figures of one load test: throughput over its steady window, latency of its requests.

Throughput is the output tokens that arrived inside the steady window (autotune.measure.steady)
over the window's length, with the batch-means interval. Request rate counts the requests that
completed inside the window; latency percentiles come from the requests that ran wholly inside
it, so neither the warm-up nor the drain after the stop (a falling load) colours them.

No measurement without tokens: a load that counted none fails (NO_TOKENS). A rate that drifted
through its window, strongly and materially (autotune.measure.drift), fails as never settled
(UNSETTLED); one its cap stopped is still a measurement, with an interval from its batches.
A context-only load (a reference only the "x" figure reads, its load capped short) too short
for a warm-up and a window is measured after its first request instead, with no interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from autotune.errors import TrialFailure
from autotune.measure.drift import UNSETTLED, rate_drift
from autotune.measure.steady import (
    BIN_S,
    SteadyState,
    batch_seconds,
    steady_state,
    token_series,
)
from autotune.measure.timing import RequestTiming, percentile


def with_launch_spread(within_rel: float, spread_rel: float, confidence: float) -> float:
    """The interval of a figure a fresh launch would give: the load's own half-width and the
    launches' spread at the same confidence, added in quadrature (independent sources)."""
    from scipy import stats  # here, not at the top: 0.8 s of import every command paid

    if spread_rel <= 0 or math.isnan(within_rel):
        return within_rel
    spread = float(stats.norm.ppf(0.5 + confidence / 2)) * spread_rel
    return math.hypot(within_rel, spread)


# The failure_kind of a load test that measured no throughput.
NO_TOKENS = "no-tokens"


def _measured(
    timings: Sequence[RequestTiming],
    estimate: SteadyState | None,
    series: np.ndarray,
    *,
    load_s: float,
    min_warmup_s: float,
) -> SteadyState:
    """No measurement without tokens: a load that counted none, a steady window that held
    none, or a load stopped before it had a steady window (its rate never settled within its
    cap: a request cap reached in a burst, an offered load sent before its first answer, a
    load too short for its warm-up and a window) is a failed measurement (TrialFailure),
    never a throughput stored as a result. Its tokens over the requests' own span would be a
    rate of the warm-up or the drain, with no window and no interval to compare: a figure of
    nothing the study ranks (a context-only load is read after its first request instead:
    summarize). The reason says which: tokens inside the load, or only after."""
    tokens = sum(max(0, t.output_tokens) for t in timings)
    if tokens == 0:
        raise TrialFailure(
            f"the load test counted no output token in {len(timings)} answered requests over "
            f"{load_s:.1f} s: the engine answered without streaming any token (empty answers, "
            "or a stream without text), so it has no throughput to record",
            kind=NO_TOKENS,
        )
    if estimate is None and series.any():
        raise TrialFailure(
            f"the load test's rate never settled within its cap: it was too short for a "
            f"warm-up and a steady window: {len(timings)} requests in {load_s:.2f} s, its "
            f"warm-up lasting at least {min_warmup_s:.2f} s (its first requests), so it has "
            "no throughput to record; give the load more requests or time "
            "(workload.max_requests, workload.max_measure_s)",
            kind=NO_TOKENS,
        )
    if estimate is None:
        raise TrialFailure(
            f"the load test's rate never settled within its cap: it stopped after {load_s:.2f} s, "
            f"before any of its {tokens} output tokens arrived inside it (they came while its "
            f"{len(timings)} requests drained), so it has no throughput to record; give the load "
            "more requests or time (workload.max_requests, workload.max_measure_s)",
            kind=NO_TOKENS,
        )
    if not estimate.tokens_per_s > 0:
        raise TrialFailure(
            f"the load test's steady window held none of its {tokens} output tokens within its "
            f"{load_s:.1f} s, so it has no throughput to record; give the load more time "
            "(workload.max_measure_s)",
            kind=NO_TOKENS,
        )
    return estimate


def after_first_request(
    timings: Sequence[RequestTiming], series: np.ndarray, *, load_start: float
) -> SteadyState | None:
    """A context-only load's rate without a steady window: the tokens that arrived from its
    first request's end until it stopped, over that span (the first request carries the
    first call's compilation, so it stays out). No interval (NaN), no batches, never settled.
    None where nothing arrived after the first request (a load of one request)."""
    warmup_s = min(t.end for t in timings) - load_start
    first_bin = round(warmup_s / BIN_S)
    tokens = float(series[first_bin:].sum())
    window_s = (len(series) - first_bin) * BIN_S
    if not (tokens > 0 and window_s > 0):
        return None
    return SteadyState(
        tokens_per_s=tokens / window_s,
        ci_rel=math.nan,
        warmup_s=warmup_s,
        window_s=window_s,
        batches=0,
        batch_s=0.0,
        lag1=0.0,
        settled=False,
    )


def load_state(
    timings: Sequence[RequestTiming],
    *,
    load_start: float,
    load_stop: float,
    min_warmup_s: float = 0.0,
    confidence: float = 0.95,
    ended: bool = False,
) -> SteadyState | None:
    """The steady state `summarize` reads a load's throughput from (None: no requests, or a
    load too short for a window), for a caller that weighs its interval itself (racing's
    check of a stop, autotune.study.run.racing). `ended`: the load's figures, whose interval
    may come from shorter batches (steady_state's `enough_batches`)."""
    if not timings:
        return None
    return steady_state(
        token_series(timings, start=load_start, end=load_stop),
        batch_s=batch_seconds(statistics.median(t.e2e_s for t in timings)),
        min_warmup_s=min_warmup_s,
        confidence=confidence,
        ends_s=[t.end - load_start for t in timings],
        enough_batches=ended,
    )


def summarize(
    timings: Sequence[RequestTiming],
    *,
    load_start: float,
    load_stop: float,
    min_warmup_s: float = 0.0,
    confidence: float = 0.95,
    launch_spread_rel: float = 0.0,
    latency_slo_ms: float | None = None,
    context_only: bool = False,
) -> dict[str, float]:
    """Every figure of a load that ran from `load_start` until `load_stop` stopped it.

    `min_warmup_s`: the warm-up lasts at least this long (the first round's turnover).
    `launch_spread_rel`: the relative standard deviation between fresh launches, added to the
    load's own interval (`throughput_ci_within_rel`) to give `throughput_ci_rel`.
    `context_only`: a load whose figure only gives context (MeasurePlan.context_only); without
    a steady window it is read after its first request (`after_first_request`), recorded with
    `throughput_window` 0, where any other load fails.
    """
    if not timings:
        raise ValueError("no measured requests")
    series = token_series(timings, start=load_start, end=load_stop)
    estimate = load_state(
        timings,
        load_start=load_start,
        load_stop=load_stop,
        min_warmup_s=min_warmup_s,
        confidence=confidence,
        ended=True,
    )
    windowless = context_only and (estimate is None or not estimate.tokens_per_s > 0)
    if windowless:
        estimate = after_first_request(timings, series, load_start=load_start)
    load_s = load_stop - load_start
    estimate = _measured(timings, estimate, series, load_s=load_s, min_warmup_s=min_warmup_s)
    drift = rate_drift(estimate.batch_rates)
    if drift is not None and drift.unsettled:
        raise TrialFailure(drift.reason(load_s), kind=UNSETTLED)
    window_start = load_start + estimate.warmup_s
    window_end = load_start + len(series) * BIN_S
    window_s = estimate.window_s
    tokens = float(series[round(estimate.warmup_s / BIN_S) :].sum())
    within = estimate.ci_rel if math.isfinite(estimate.ci_rel) else math.nan
    figures = {
        "throughput_output_tokens_per_s": estimate.tokens_per_s,
        "throughput_ci_within_rel": within,
        "throughput_ci_rel": with_launch_spread(within, launch_spread_rel, confidence),
        "throughput_batches": float(estimate.batches),
        "throughput_batch_s": estimate.batch_s,
        "throughput_lag1_autocorrelation": estimate.lag1,
        "warmup_settled": 1.0 if estimate.settled else 0.0,
        "load_warmup_s": estimate.warmup_s,
    }
    if windowless:  # its rate after the first request: no steady window, no interval
        figures["throughput_window"] = 0.0
    if drift is not None and math.isfinite(drift.change_rel):  # autotune.measure.drift's look
        figures |= {"throughput_drift_rel": drift.change_rel, "throughput_drift_p": drift.p_value}
    completed = [t for t in timings if window_start <= t.end <= window_end]
    inside = [t for t in completed if t.start >= window_start] or completed or list(timings)
    ttft = [t.ttft_s * 1000 for t in inside]
    e2e = [t.e2e_s * 1000 for t in inside]
    tpot = [t.tpot_s * 1000 for t in inside if t.tpot_s is not None]
    requests_per_s = len(completed) / window_s
    figures |= {
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p95_ms": percentile(ttft, 95),
        "tpot_p50_ms": percentile(tpot, 50),
        "tpot_p95_ms": percentile(tpot, 95),
        "e2e_latency_p50_ms": percentile(e2e, 50),
        "e2e_latency_p95_ms": percentile(e2e, 95),
        "throughput_requests_per_s": requests_per_s,
        "measured_requests": float(len(inside)),
        "load_requests": float(len(timings)),
        "measured_output_tokens": tokens,
        "measured_window_s": window_s,
        "output_tokens_per_request": statistics.fmean(t.output_tokens for t in inside),
    }
    if latency_slo_ms is not None:
        # The share of requests within the SLO, at the measured request rate.
        good = sum(1 for value in e2e if value <= latency_slo_ms)
        figures["goodput_requests_per_s"] = requests_per_s * good / len(e2e)
    return figures
