"""Latency and throughput figures from per-request timings."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.measure.timing import RequestTiming, percentile, summarize


@pytest.mark.parametrize("q", [0, 25, 50, 90, 95, 100])
def test_percentile_matches_numpy(q: float) -> None:
    values = [3.0, 1.0, 7.5, 2.25, 9.0, 4.0, 4.0]
    assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_summarize_units_and_values() -> None:
    # Two requests over a 2 s window: 10 and 4 output tokens.
    timings = [
        RequestTiming(start=0.0, first_token=0.1, last_token=1.0, end=1.0, output_tokens=10),
        RequestTiming(start=1.0, first_token=1.2, last_token=1.8, end=2.0, output_tokens=4),
    ]
    figures = summarize(timings, latency_slo_ms=1000)
    assert figures["throughput_output_tokens_per_s"] == pytest.approx(7.0)
    assert figures["throughput_requests_per_s"] == pytest.approx(1.0)
    assert figures["ttft_p50_ms"] == pytest.approx(150.0)
    # TPOT: (1.0-0.1)/9 = 100 ms and (1.8-1.2)/3 = 200 ms.
    assert figures["tpot_p50_ms"] == pytest.approx(150.0)
    assert figures["e2e_latency_p95_ms"] == pytest.approx(1000.0)
    assert figures["goodput_requests_per_s"] == pytest.approx(1.0)  # both within 1000 ms
    assert figures["throughput_blocks"] == 2.0  # block size 1: each request is a block
    assert figures["throughput_ci_rel"] > 0.5  # two blocks of 10 and 4 tok/s: barely known
    suffixes = ("_ms", "_s", "_per_s", "_requests", "_tokens", "_blocks", "_rel")
    assert all(name.endswith(suffixes) for name in figures)


def test_static_batch_end_counts_in_e2e_not_tpot() -> None:
    timing = RequestTiming(start=0.0, first_token=0.5, last_token=0.7, end=2.0, output_tokens=3)
    assert timing.e2e_s == 2.0
    assert timing.tpot_s == pytest.approx(0.1)


def test_one_token_answers_have_no_tpot() -> None:
    timing = RequestTiming(start=0, first_token=0.2, last_token=0.2, end=0.2, output_tokens=1)
    figures = summarize([timing])
    assert timing.tpot_s is None
    assert np.isnan(figures["tpot_p50_ms"])
