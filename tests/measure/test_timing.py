"""Latency and throughput figures from per-request timings."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.measure.summary import summarize
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
    latency_only = summarize(timings, load_start=0.0, load_stop=0.0, latency_slo_ms=1000)
    assert latency_only["ttft_p50_ms"] == pytest.approx(150.0)
    # TPOT: (1.0-0.1)/9 = 100 ms and (1.8-1.2)/3 = 200 ms.
    assert latency_only["tpot_p50_ms"] == pytest.approx(150.0)
    assert latency_only["e2e_latency_p95_ms"] == pytest.approx(1000.0)
    assert latency_only["output_tokens_per_request"] == pytest.approx(7.0)
    # With no whole bin measured, the window is the requests' own span.
    assert latency_only["throughput_output_tokens_per_s"] == pytest.approx(7.0)
    assert latency_only["throughput_requests_per_s"] == pytest.approx(1.0)
    assert latency_only["goodput_requests_per_s"] == pytest.approx(1.0)  # both within 1 s
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
    figures = summarize([timing], load_start=0.0, load_stop=0.2)
    assert timing.tpot_s is None
    assert np.isnan(figures["tpot_p50_ms"])
