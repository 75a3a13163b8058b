"""When a measured rate never settled: drift in the steady window, strong and material.

A load's steady window (autotune.measure.steady) is where its rate is read. The warm-up flag
(`settled`) asks only whether MSER's cut and a 5% trend test found the start of it; by chance
alone it calls a stationary load unsettled a few times in a hundred, so it is a caveat, never
a failure. A measurement fails as "never settled" only on evidence of drift that is both

- **strong**: the t-test of a linear fit's slope over the window's batch rates rejects "no
  trend" at DRIFT_LEVEL (0.1%, two-sided). Batch rates whose residuals from the fit correlate
  (lag 1) are merged in pairs first, and a positive correlation left widens the slope's error
  by the AR(1) factor, so a wavy but stationary load is not read as a trend; and
- **material**: the mean rate of the window's last half differs from its first half's by more
  than MATERIAL_DRIFT_REL (10%), a change that would move a ranking.

A stationary load fails at most as often as the test's level, 1 in 1,000 trials, and the
materiality rule cuts that further (tests/measure/test_drift.py shows the rate by simulation);
a rate that keeps moving by tens of percent through its window fails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.measure.steady import MAX_LAG1, MIN_BATCHES, TESTED_BATCHES, correlated

# The false-alarm rate of the strength test, per measurement (two-sided).
DRIFT_LEVEL = 0.001
# The least move between the window's halves that counts, over the first half's rate.
MATERIAL_DRIFT_REL = 0.10
# The failure_kind of a measurement whose rate never settled.
UNSETTLED = "unsettled"


@dataclass(frozen=True)
class Drift:
    """The trend of one steady window's batch rates."""

    change_rel: float  # the last half's mean rate over the first half's, less 1
    p_value: float  # of the slope's t-test, two-sided
    batches: int  # the batch rates tested (after merging)

    @property
    def strong(self) -> bool:
        return self.p_value < DRIFT_LEVEL

    @property
    def material(self) -> bool:
        return abs(self.change_rel) > MATERIAL_DRIFT_REL

    @property
    def unsettled(self) -> bool:
        """Whether the rate never settled: drift both strong and material."""
        return self.strong and self.material

    def reason(self, load_s: float) -> str:
        """Why the measurement failed, in one line."""
        way = "rose" if self.change_rel > 0 else "fell"
        return (
            f"the load test's rate never settled within its {load_s:.1f} s: it {way} "
            f"{abs(self.change_rel):.0%} from the first half of its measured window to the "
            f"second (more than {MATERIAL_DRIFT_REL:.0%}; trend p = {self.p_value:.1g} over "
            f"{self.batches} batches, below {DRIFT_LEVEL:g}), so it has no throughput to "
            "record; measure again on a quieter machine, or give the load longer to settle "
            "(workload.max_warmup_s)"
        )


def _residual_lag1(rates: np.ndarray) -> float:
    """The lag-1 autocorrelation of `rates` less their linear fit (a trend alone would read
    as correlation)."""
    x = np.arange(len(rates), dtype=float)
    slope, intercept = np.polyfit(x, rates, 1)
    residuals = rates - (slope * x + intercept)
    denominator = float(np.dot(residuals, residuals))
    if denominator <= 0:
        return 0.0
    return float(np.dot(residuals[1:], residuals[:-1]) / denominator)


def rate_drift(batch_rates: Sequence[float]) -> Drift | None:
    """The drift of a window's batch rates (in order); None with fewer than TESTED_BATCHES of
    them or no rate (too few to tell a trend from noise at DRIFT_LEVEL)."""
    from scipy import stats  # here, not at the top: 0.8 s of import every command paid

    rates = np.asarray(batch_rates, dtype=float)
    if len(rates) < TESTED_BATCHES or not rates.mean() > 0:
        return None
    lag1 = _residual_lag1(rates)
    while len(rates) >= TESTED_BATCHES and correlated(lag1, len(rates)):
        pairs = len(rates) // 2
        rates = rates[: 2 * pairs].reshape(pairs, 2).mean(axis=1)
        lag1 = _residual_lag1(rates)
    n = len(rates)
    if n < MIN_BATCHES:
        return None
    half = n // 2
    first, last = float(rates[:half].mean()), float(rates[-half:].mean())
    change = last / first - 1.0 if first > 0 else math.inf
    if np.ptp(rates) == 0:
        return Drift(change, 1.0, n)
    fit = stats.linregress(np.arange(n), rates)
    error = fit.stderr
    r = min(lag1 + 1 / n, MAX_LAG1)  # the estimate is biased low by about 1/n
    if r > 0:
        error *= math.sqrt((1 + r) / (1 - r))
    if not error > 0:
        return Drift(change, 0.0 if fit.slope != 0 else 1.0, n)
    p_value = float(2 * stats.t.sf(abs(fit.slope) / error, df=n - 2))
    return Drift(change, p_value, n)
