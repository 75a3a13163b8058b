"""Verify's verdicts: worse than recorded by more than the tolerance fails, better passes."""

from __future__ import annotations

import math

import pytest

from autotune.verify import THROUGHPUT, accuracy_check, speed_check, with_intervals


@pytest.mark.parametrize(
    ("metric", "recorded", "measured", "passed"),
    [
        ("throughput_output_tokens_per_s", 100.0, 76.0, True),  # 24% lower: within 25%
        ("throughput_output_tokens_per_s", 100.0, 74.0, False),
        ("throughput_output_tokens_per_s", 100.0, 300.0, True),  # faster never fails
        ("e2e_latency_p95_ms", 200.0, 249.0, True),
        ("e2e_latency_p95_ms", 200.0, 251.0, False),
        ("e2e_latency_p95_ms", 200.0, 20.0, True),
    ],
)
def test_speed_check_is_one_sided(
    metric: str, recorded: float, measured: float, passed: bool
) -> None:
    assert speed_check(metric, recorded, measured, 0.25).passed is passed


@pytest.mark.parametrize("recorded", [None, 0.0, math.nan])
def test_speed_check_without_a_usable_record_is_not_judged(recorded: float | None) -> None:
    check = speed_check("ttft_p50_ms", recorded, 10.0, 0.25)
    assert check.passed is None and check.rule == "not comparable"


def test_accuracy_may_drop_by_max_drop_only() -> None:
    assert accuracy_check(0.80, 0.75, 0.05).passed
    assert not accuracy_check(0.80, 0.74, 0.05).passed
    assert accuracy_check(0.80, 0.95, 0.05).passed


def test_verify_says_whether_the_recorded_interval_covers_the_relaunch() -> None:
    recorded = {THROUGHPUT: 1000.0, "throughput_ci_rel": 0.03}
    inside = {THROUGHPUT: 980.0, "throughput_ci_rel": 0.02}
    outside = {THROUGHPUT: 900.0, "throughput_ci_rel": 0.02}
    check = with_intervals(speed_check(THROUGHPUT, 1000.0, 980.0, 0.05), recorded, inside)
    assert check.recorded_interval == pytest.approx((970.0, 1030.0))
    assert check.measured_interval == pytest.approx((960.4, 999.6))
    assert check.covered is True and check.passed is True
    missed = with_intervals(speed_check(THROUGHPUT, 1000.0, 900.0, 0.05), recorded, outside)
    assert missed.covered is False and missed.passed is False
    # A trial that recorded no interval (too short) cannot be said to cover anything.
    bare = with_intervals(speed_check(THROUGHPUT, 1000.0, 980.0, 0.05), {THROUGHPUT: 1.0}, inside)
    assert bare.recorded_interval is None and bare.covered is None
