"""The recommendation against the deploy target's defaults: its gain, with an interval, and
what a million output tokens cost on each.

The baseline trial is the deploy engine started with its own defaults
(autotune.space.engine_defaults): what a user runs without autotune, so the gain over it is the
figure a deployment decision rests on. Both throughputs come from load tests with intervals
of their own: two independent measurements, so on the log scale, where a ratio is a
difference, their relative half-widths add in quadrature (the delta method's first order).

Cost per million output tokens is the machine's hourly price over the tokens it serves in an
hour: price / (tokens/s x 3600) x 1e6. No price is assumed: without one there is no cost.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.measure.registry import THROUGHPUT
from autotune.records.stored import TrialRecord


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    """The completed trial of the deploy target's defaults, or None (not measured yet, or a
    study without one)."""
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if TrialRecord.of(trial).baseline:
            return trial
    return None


def throughput_ratio(
    trial: FrozenTrial, base: FrozenTrial
) -> tuple[float, float | None, float, float | None] | None:
    """(trial's throughput over base's, the ratio's relative half-width or None, base's
    throughput, base's relative half-width or None); None without both figures."""
    mine, theirs = TrialRecord.of(trial), TrialRecord.of(base)
    rate, base_rate = mine.figure(THROUGHPUT), theirs.figure(THROUGHPUT)
    if rate is None or base_rate is None or base_rate <= 0:
        return None
    rel, base_rel = mine.throughput_interval_rel(), theirs.throughput_interval_rel()
    ci_rel = None
    if rel is not None and base_rel is not None:
        ci_rel = math.expm1(math.hypot(math.log1p(rel), math.log1p(base_rel)))
    return rate / base_rate, ci_rel, base_rate, base_rel


@dataclass(frozen=True)
class Gain:
    """The recommendation's throughput over the baseline's."""

    times: float
    # Relative half-width (95%) on the log scale: times / (1 + ci_rel) to times * (1 + ci_rel).
    # None: a figure has no interval.
    ci_rel: float | None
    label: str  # "swift deploy's defaults"
    baseline_trial: int
    baseline_tokens_per_s: float
    baseline_ci_rel: float | None

    def to_dict(self) -> dict[str, float | int | str | None]:
        return asdict(self)

    def words(self) -> str:
        """'1.31× (±9%) LMDeploy's defaults'."""
        interval = "no interval" if self.ci_rel is None else f"±{self.ci_rel:.0%}"
        return f"{self.times:.2f}× ({interval}) {self.label}"

    def detail(self) -> str:
        """The baseline's own figure: 'trial 2, 45.1 tok/s ±3.0%'."""
        figure = f"{self.baseline_tokens_per_s:.1f} tok/s"
        if self.baseline_ci_rel is not None:
            figure += f" ±{self.baseline_ci_rel:.1%}"
        return f"trial {self.baseline_trial}, {figure}"


def gain_over_baseline(trial: FrozenTrial, baseline: FrozenTrial | None) -> Gain | None:
    """`trial`'s gain over `baseline`; None without both figures, or for the baseline itself."""
    if baseline is None or baseline.number == trial.number:
        return None
    ratio = throughput_ratio(trial, baseline)
    if ratio is None:
        return None
    times, ci_rel, base_rate, base_rel = ratio
    label = TrialRecord.of(baseline).baseline or "the baseline"
    return Gain(times, ci_rel, label, baseline.number, base_rate, base_rel)


def cost_per_million_tokens(
    tokens_per_s: float | None, price_per_hour: float | None
) -> float | None:
    """USD per million output tokens at `price_per_hour`; None without a price or a rate."""
    if price_per_hour is None or tokens_per_s is None or not tokens_per_s > 0:
        return None
    if not math.isfinite(tokens_per_s):
        return None
    return price_per_hour / (tokens_per_s * 3600) * 1e6


def trial_cost(trial: FrozenTrial | None, price_per_hour: float | None) -> float | None:
    """A trial's cost per million output tokens at `price_per_hour`, or None."""
    if trial is None:
        return None
    return cost_per_million_tokens(TrialRecord.of(trial).figure(THROUGHPUT), price_per_hour)


def usd(amount: float) -> str:
    """'$0.52'; three significant digits below a cent, where two decimals would show $0.00."""
    return f"${amount:.3g}" if amount < 0.01 else f"${amount:,.2f}"


def cost_words(cost: float) -> str:
    """'$0.52 per million output tokens'."""
    return f"{usd(cost)} per million output tokens"
