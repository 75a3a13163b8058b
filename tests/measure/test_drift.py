"""The never-settled rule: drift fails a measurement only when strong and material, so a
stationary load almost never fails, and a rate that keeps moving does."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from autotune.errors import TrialFailure
from autotune.measure.drift import DRIFT_LEVEL, UNSETTLED, Drift, rate_drift
from autotune.measure.steady import BIN_S, steady_state
from autotune.measure.summary import summarize
from autotune.measure.timing import RequestTiming


def simulated_load(seed: int, *, ramp: float = 0.0) -> tuple[np.ndarray, list[float], float]:
    """(tokens per bin, completions, batch seconds) of a saturated server: prefill/decode
    waves of 2-6 s around 200-3,000 tok/s, Poisson tokens, a slow wander of 3% (AR(1) per
    second, 0.9), a slow start of up to 10 s, 40-240 s in all; its rate multiplied by 1 +
    `ramp` x (time over the load's length)."""
    rng = np.random.default_rng(seed)
    seconds = rng.uniform(40, 240)
    at = np.arange(int(seconds / BIN_S)) * BIN_S
    period, steady = rng.uniform(2.0, 6.0), rng.uniform(200, 3000)
    wander = np.zeros(int(seconds) + 2)
    for i in range(1, len(wander)):
        wander[i] = 0.9 * wander[i - 1] + rng.normal(0, 0.03 * np.sqrt(1 - 0.81))
    rate = steady * (1 + 0.4 * np.sin(2 * np.pi * at / period + rng.uniform(0, 6.3)))
    rate *= (1 + wander[at.astype(int)]) * (1 + ramp * at / seconds)
    rate = np.where(at < rng.uniform(0, 10), rate / 3, rate)
    ends = [k * period for k in range(1, int(seconds / period) + 1) for _ in range(8)]
    return rng.poisson(rate * BIN_S).astype(float), ends, 2 * period


def drift_of(seed: int, *, ramp: float = 0.0) -> Drift | None:
    series, ends, batch_s = simulated_load(seed, ramp=ramp)
    estimate = steady_state(
        series,
        batch_s=batch_s,
        min_warmup_s=batch_s / 2,
        confidence=0.95,
        ends_s=ends,
        enough_batches=True,
    )
    assert estimate is not None
    return rate_drift(estimate.batch_rates)


def test_a_stationary_load_fails_far_less_than_once_in_a_thousand() -> None:
    # 2,000 stationary loads through the steady window and the drift rule summarize applies.
    drifts = [drift_of(seed) for seed in range(2000)]
    tested = [d for d in drifts if d is not None]
    assert len(tested) > 1500
    assert sum(d.unsettled for d in tested) <= 1  # the rule: below 1 in 1,000 (0 seen)
    # The slope's test alone fires more often than its level under the slow wander (batch
    # rates correlated beyond what merging sees): the material move is what keeps it rare.
    assert sum(d.strong for d in tested) < 0.03 * len(tested)
    assert not any(d.material for d in tested)


def test_a_rate_that_keeps_falling_fails_and_one_rising_through_its_window_too() -> None:
    # Losing 30% over the load (a machine taking on work): the window keeps it all.
    falling = [drift_of(10_000 + seed, ramp=-0.3) for seed in range(60)]
    tested = [d for d in falling if d is not None]
    assert sum(d.unsettled for d in tested) >= 0.8 * len(tested)
    assert all(d.change_rel < 0 for d in tested if d.unsettled)
    # A rise's first half is cut as warm-up (autotune.measure.steady); a rate that still rises
    # 30% through the window it kept fails: 16 batch rates, 2% noise.
    rng = np.random.default_rng(1)
    rising = 1000 * np.linspace(1.0, 1.3, 16) * (1 + rng.normal(0, 0.02, 16))
    drift = rate_drift(rising)
    assert drift is not None and drift.unsettled and drift.p_value < DRIFT_LEVEL
    assert drift.change_rel > 0.1


def test_strong_but_small_and_large_but_weak_moves_do_not_fail() -> None:
    rng = np.random.default_rng(2)
    small = 1000 * np.linspace(1.0, 1.05, 40) * (1 + rng.normal(0, 0.002, 40))
    drift = rate_drift(small)
    assert drift is not None and drift.strong and not drift.material and not drift.unsettled
    noisy = 1000 * (1 + rng.normal(0, 0.3, 8))
    noisy[4:] *= 1.2
    drift = rate_drift(noisy)
    assert drift is not None and not drift.unsettled
    assert rate_drift([1000.0] * 7) is None  # too few to tell


def _timings(rate_at: Callable[[float], float]) -> list[RequestTiming]:
    """Four requests in flight for 60 s, each 1 s long, tokens streamed at `rate_at(t)`
    tokens per second shared among them."""
    timings = []
    for lane in range(4):
        for k in range(60):
            start = k + lane * 0.25
            tokens = max(1, round(rate_at(start) / 4))
            chunks = tuple(start + (i + 1) / tokens for i in range(tokens))
            timings.append(
                RequestTiming(
                    start=start,
                    first_token=chunks[0],
                    last_token=chunks[-1],
                    end=start + 1.0,
                    output_tokens=tokens,
                    chunk_times=chunks,
                )
            )
    return timings


def test_summarize_fails_a_drifting_load_with_its_reason_and_records_what_it_saw() -> None:
    figures = summarize(_timings(lambda t: 400.0), load_start=0.0, load_stop=61.0)
    assert figures["throughput_drift_p"] > DRIFT_LEVEL
    assert abs(figures["throughput_drift_rel"]) < 0.1
    with pytest.raises(TrialFailure) as failed:
        summarize(_timings(lambda t: 600.0 - 5.0 * t), load_start=0.0, load_stop=61.0)
    assert failed.value.kind == UNSETTLED
    assert "never settled" in failed.value.reason and "fell" in failed.value.reason
