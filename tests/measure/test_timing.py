"""Latency and throughput figures from per-request timings."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.errors import TrialFailure
from autotune.measure.summary import NO_TOKENS, summarize
from autotune.measure.timing import RequestTiming, percentile


@pytest.mark.parametrize("q", [0, 25, 50, 90, 95, 100])
def test_percentile_matches_numpy(q: float) -> None:
    values = [3.0, 1.0, 7.5, 2.25, 9.0, 4.0, 4.0]
    assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_summarize_units_and_values() -> None:
    # Two requests back to back, each alone in flight: 10 and 4 output tokens over 1 s each.
    timings = [
        RequestTiming(start=0.0, first_token=0.1, last_token=1.0, end=1.0, output_tokens=10),
        RequestTiming(start=1.0, first_token=1.2, last_token=1.8, end=2.0, output_tokens=4),
    ]
    figures = summarize(
        timings, load_start=0.0, load_stop=2.0, min_warmup_s=0.0, latency_slo_ms=1000
    )
    # Throughput: the tokens that arrived inside the window over its length.
    window = figures["measured_window_s"]
    assert figures["throughput_output_tokens_per_s"] == pytest.approx(
        figures["measured_output_tokens"] / window
    )
    assert 0 < figures["measured_output_tokens"] <= 14 and 0 < window <= 2.0
    # Latency from the requests inside the window: the second one (the first is warm-up).
    assert figures["load_warmup_s"] == pytest.approx(1.0)
    assert figures["ttft_p50_ms"] == pytest.approx(200.0)
    assert figures["tpot_p50_ms"] == pytest.approx(200.0)  # (1.8-1.2)/3
    assert figures["e2e_latency_p95_ms"] == pytest.approx(1000.0)
    assert figures["output_tokens_per_request"] == pytest.approx(4.0)
    assert figures["goodput_requests_per_s"] == figures["throughput_requests_per_s"] > 0
    # Two seconds are too short for an interval or a settled rate, and say so.
    assert np.isnan(figures["throughput_ci_rel"])
    assert figures["warmup_settled"] == 0.0
    suffixes = ("_ms", "_s", "_per_s", "_requests", "_tokens", "_batches", "_rel",
                "_per_request", "_autocorrelation", "_settled")  # fmt: skip
    assert all(name.endswith(suffixes) for name in figures)


def test_static_batch_end_counts_in_e2e_not_tpot() -> None:
    timing = RequestTiming(start=0.0, first_token=0.5, last_token=0.7, end=2.0, output_tokens=3)
    assert timing.e2e_s == 2.0
    assert timing.tpot_s == pytest.approx(0.1)


def test_one_token_answers_have_no_tpot() -> None:
    timing = RequestTiming(start=0, first_token=0.2, last_token=0.2, end=0.2, output_tokens=1)
    figures = summarize([timing], load_start=0.0, load_stop=0.25)
    assert timing.tpot_s is None
    assert np.isnan(figures["tpot_p50_ms"])


def test_a_load_without_tokens_is_a_failed_measurement_not_a_throughput_of_0() -> None:
    silent = [RequestTiming(start=0.0, first_token=0.5, last_token=0.5, end=1.0, output_tokens=0)]
    with pytest.raises(TrialFailure) as caught:
        summarize(silent * 3, load_start=0.0, load_stop=2.0)
    assert caught.value.kind == NO_TOKENS and "counted no output token" in caught.value.reason
    # Tokens, but every one came after the load stopped (its requests drained): its rate never
    # settled within its cap, so no throughput, not the drain's tokens over its span.
    late = [RequestTiming(start=0.0, first_token=2.5, last_token=3.0, end=3.0, output_tokens=9)]
    with pytest.raises(TrialFailure) as caught:
        summarize(late, load_start=0.0, load_stop=2.0)
    assert caught.value.kind == NO_TOKENS and "never settled within its cap" in caught.value.reason
    # A load stopped before one whole bin of time (a request cap reached in a burst): the same.
    burst = [RequestTiming(start=0.0, first_token=0.01, last_token=0.3, end=0.3, output_tokens=9)]
    with pytest.raises(TrialFailure) as caught:
        summarize(burst * 4, load_start=0.0, load_stop=0.02)
    assert caught.value.kind == NO_TOKENS and "stopped after 0.02 s" in caught.value.reason
    # A short load whose tokens arrived inside it is measured, flagged while unsettled.
    inside = [RequestTiming(start=0.0, first_token=0.1, last_token=0.9, end=0.9, output_tokens=9)]
    short = summarize(inside, load_start=0.0, load_stop=1.0)
    assert short["throughput_output_tokens_per_s"] > 0
    assert short["warmup_settled"] == 0.0 and np.isnan(short["throughput_ci_rel"])
