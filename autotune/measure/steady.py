"""Steady-state throughput from streamed tokens: where the warm-up ends, how well the rate is known.

A load test records when its output tokens arrived (a server's stream chunks, or an in-process
engine's decoding steps), counted in fine bins of time from the start of the load.

- **Where does the warm-up end?** A fresh engine, and a warm one given a new load, starts slow.
  MSER-5 (White 1997, Franklin & White 2008) cuts the start that minimises the standard error
  of what remains, searched while a quarter of the run is left (so the last few batches cannot
  fake a minimum); a cut in the second half means the rate has not settled. The warm-up lasts
  at least `min_warmup_s` (one full turnover of the batch). MSER misses a slow climb buried in
  noise, so while the steady window's batch means still rise significantly (the t-test of a
  linear fit's slope) its first batch is cut too; a rate that keeps falling, or climbing past
  half the run, has not settled.
- **How well is the steady rate known?** The rate is the tokens inside the steady window over
  its length. Its interval comes from non-overlapping batch means over windows of about
  `batch_s`, each ending at a request's completion, so no request cycle is split between two.
  A server at saturation swings in waves (prefill, then decode), so neighbouring windows can be
  correlated: while the lag-1 autocorrelation is significant the batches are merged in pairs,
  and a positive correlation that remains widens the interval by the AR(1) variance factor.
  A load that ended with too few batches for one takes shorter ones (shorter_batches).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.measure.timing import RequestTiming

# Resolution of the token series: fine enough that a batch boundary falls within 5% of a
# 1-second batch, coarse enough that a 10-minute load is 12,000 numbers.
BIN_S = 0.05
# MSER-5: the truncation rule runs on means of five observations (bins).
MSER_BATCH_BINS = 5
# A batch spans this many turnovers (median end-to-end latency): each holds whole waves of a
# saturated server's prefill/decode rhythm instead of a fraction of one.
TURNOVERS_PER_BATCH = 2.0
MIN_BATCH_S = 0.5
# The fewest batch means an interval is computed from (Student's t with 3 degrees of freedom).
MIN_BATCHES = 4
# The fewest batch means whose autocorrelation is tested (merging pairs leaves MIN_BATCHES),
# and the fewest a load stops on: a rule that stops at the first narrow interval favours
# intervals that came out narrow by chance, far more often from 4 batches than from 8.
TESTED_BATCHES = 2 * MIN_BATCHES
# Two-sided level of the lag-1 autocorrelation test; 10% rather than 5%, because missing a
# correlation narrows the interval while a false alarm only widens it.
CORRELATION_LEVEL = 0.10
# The AR(1) factor stops growing here: a stronger correlation means the run is too short.
MAX_LAG1 = 0.9
# Level of the test that the steady window's batch means have no linear trend.
TREND_LEVEL = 0.05


def batch_seconds(e2e_median_s: float) -> float:
    """The length of one batch mean for requests that take `e2e_median_s` each."""
    return max(MIN_BATCH_S, TURNOVERS_PER_BATCH * e2e_median_s)


def token_arrivals(timing: RequestTiming) -> tuple[np.ndarray, float]:
    """When `timing`'s output tokens arrived, and how many tokens each instant carries.

    A streamed answer's tokens are spread evenly over its chunks (the usage count over the
    chunks that carried text); an answer with no chunk times (in-process) has its first token
    at `first_token` and the others evenly up to `last_token`. No tokens: no instants.
    """
    if timing.output_tokens <= 0:
        return np.zeros(0), 0.0
    if timing.chunk_times:
        at = np.asarray(timing.chunk_times, dtype=float)
        return at, timing.output_tokens / len(at)
    if timing.output_tokens == 1:
        return np.array([timing.first_token]), 1.0
    return np.linspace(timing.first_token, timing.last_token, timing.output_tokens), 1.0


def token_series(
    timings: Sequence[RequestTiming], *, start: float, end: float, bin_s: float = BIN_S
) -> np.ndarray:
    """Output tokens per `bin_s` bin from `start` to `end` (whole bins; one clock), each
    answer's tokens placed by token_arrivals."""
    bins = max(0, math.floor((end - start) / bin_s + 1e-9))
    stamps: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    for timing in timings:
        at, each = token_arrivals(timing)
        if len(at):
            stamps.append(at)
            weights.append(np.full(len(at), each))
    if bins == 0 or not stamps:
        return np.zeros(bins)
    index = np.floor((np.concatenate(stamps) - start) / bin_s).astype(np.int64)
    weight = np.concatenate(weights)
    inside = (index >= 0) & (index < bins)
    return np.bincount(index[inside], weights=weight[inside], minlength=bins).astype(float)


def aggregate(series: np.ndarray, size: int) -> np.ndarray:
    """Sums over consecutive groups of `size` bins from the start; a partial last group is
    left out."""
    groups = len(series) // size
    return series[: groups * size].reshape(groups, size).sum(axis=1)


def mser_truncation(batches: np.ndarray) -> int:
    """How many leading batches to drop: the cut that minimises the marginal standard error
    (the spread of what remains over its count squared), keeping at least a quarter of them."""
    n = len(batches)
    if n < 4:
        return 0
    centred = batches - batches.mean()  # numerically kinder sums of squares
    tail_sum = np.cumsum(centred[::-1])[::-1]
    tail_squares = np.cumsum((centred * centred)[::-1])[::-1]
    kept = n - np.arange(n)
    squared_deviations = tail_squares - tail_sum**2 / kept
    statistic = squared_deviations / kept.astype(float) ** 2
    last = n - max(2, n // 4)
    return int(np.argmin(statistic[: last + 1]))  # the first minimum: the shortest cut


def lag1_autocorrelation(values: np.ndarray) -> float:
    if len(values) < 3:
        return 0.0
    centred = values - values.mean()
    denominator = float(np.dot(centred, centred))
    if denominator <= 0:
        return 0.0
    return float(np.dot(centred[1:], centred[:-1]) / denominator)


def correlated(lag1: float, n: int) -> bool:
    """Whether a lag-1 autocorrelation of `n` batch means is significant: under independence it
    is about normal with mean -1/n and variance 1/n (Bartlett)."""
    from scipy import stats  # here, not at the top: 0.8 s of import every command paid

    z = float(stats.norm.ppf(1 - CORRELATION_LEVEL / 2))
    return abs(lag1 + 1 / n) > z / math.sqrt(n)


@dataclass(frozen=True)
class BatchMeans:
    """The interval of a mean rate from batch means of one window."""

    rates: tuple[float, ...]  # tokens/s of each batch
    batch_s: float  # their mean length
    lag1: float
    ci_rel: float  # half-width over the mean; inf with fewer than MIN_BATCHES batches
    # Whether there were enough batch means (TESTED_BATCHES, before merging) to test their
    # correlation, so that the interval accounts for it.
    correlation_tested: bool = False
    unmerged: tuple[float, ...] = ()  # the rates before merging (autotune.measure.drift)


def _variance_of_mean(rates: np.ndarray, lag1: float) -> float:
    """The variance of the mean of `rates`, widened by the AR(1) factor where a positive
    lag-1 autocorrelation is significant (negative ones only narrow it: left alone)."""
    factor = 1.0
    if lag1 > 0 and correlated(lag1, len(rates)):
        r = min(lag1, MAX_LAG1)
        factor = (1 + r) / (1 - r)
    return float(rates.var(ddof=1)) / len(rates) * factor


def _rates(series: np.ndarray, edges: np.ndarray, bin_s: float) -> np.ndarray:
    totals = np.concatenate(([0.0], np.cumsum(series)))
    return (totals[edges[1:]] - totals[edges[:-1]]) / (np.diff(edges) * bin_s)


def fixed_edges(bins: int, batch_bins: int) -> np.ndarray:
    """Batch boundaries every `batch_bins` bins from the start; a partial last batch is left
    out."""
    return np.arange(0, bins + 1, max(1, batch_bins))


def completion_edges(
    ends_s: Sequence[float], *, bins: int, batch_s: float, bin_s: float
) -> np.ndarray:
    """Batch boundaries at every m-th request completion (instants from the window's start),
    m the completions of about `batch_s`; a partial last batch is left out.

    A boundary at a completion never cuts a request's cycle in two: an in-process static
    batch falls wholly into one batch mean, and a saturated server's wave of completions ends
    a batch rather than straddling two. Fixed-length windows would count such a cycle partly
    in each, and the batch means would scatter by the cut alone.
    """
    inside = np.sort(np.asarray([e for e in ends_s if 0 < e <= bins * bin_s], dtype=float))
    if len(inside) == 0:
        return np.array([0], dtype=np.int64)
    per_batch = max(1, round(len(inside) * batch_s / (bins * bin_s)))
    chosen = np.round(inside[per_batch - 1 :: per_batch] / bin_s).astype(np.int64)
    return np.unique(np.concatenate(([0], np.clip(chosen, 1, bins))))


def batch_means(
    series: np.ndarray, *, edges: np.ndarray, bin_s: float, confidence: float
) -> BatchMeans:
    """Batch means of `series` between `edges` (bin indices), merged in pairs while neighbours
    correlate (module docstring).

    Merging leaves fewer batches, whose own correlation is hard to see; so the variance of the
    mean is the larger of the merged batches' and the first batches' under the AR(1) factor.
    """
    from scipy import stats  # here, not at the top: 0.8 s of import every command paid

    first = rates = _rates(series, edges, bin_s)
    first_lag1 = lag1 = lag1_autocorrelation(rates)
    while len(rates) >= TESTED_BATCHES and correlated(lag1, len(rates)):
        edges = edges[::2]
        rates = _rates(series, edges, bin_s)
        lag1 = lag1_autocorrelation(rates)
    n = len(rates)
    mean = float(rates.mean()) if n else 0.0
    ci_rel = math.inf
    if n >= MIN_BATCHES and mean > 0:
        variance = max(_variance_of_mean(rates, lag1), _variance_of_mean(first, first_lag1))
        quantile = float(stats.t.ppf(0.5 + confidence / 2, df=n - 1))
        ci_rel = quantile * math.sqrt(variance) / mean
    batch_s = float(np.diff(edges).mean()) * bin_s if n else 0.0
    tested = len(first) >= TESTED_BATCHES
    unmerged = tuple(float(r) for r in first)
    return BatchMeans(tuple(float(r) for r in rates), batch_s, lag1, ci_rel, tested, unmerged)


@dataclass(frozen=True)
class SteadyState:
    """The steady part of one load: its rate, interval, and where the warm-up ended."""

    tokens_per_s: float
    ci_rel: float  # half-width over the rate; inf when the window holds too few batches
    warmup_s: float  # from the start of the load to the start of the steady window
    window_s: float
    batches: int
    batch_s: float
    lag1: float  # of the batch means the interval uses
    settled: bool  # MSER's cut lies in the first half of the run: the rate has settled
    correlation_tested: bool = False  # BatchMeans.correlation_tested
    # The window's batch rates before merging, in order (autotune.measure.drift tests them).
    batch_rates: tuple[float, ...] = ()

    @property
    def ci_low(self) -> float:
        return self.tokens_per_s * max(0.0, 1.0 - self.ci_rel)

    @property
    def ci_high(self) -> float:
        return self.tokens_per_s * (1.0 + self.ci_rel)


def steady_state(
    series: np.ndarray,
    *,
    batch_s: float,
    min_warmup_s: float,
    confidence: float,
    ends_s: Sequence[float] | None = None,
    bin_s: float = BIN_S,
    enough_batches: bool = False,
) -> SteadyState | None:
    """The steady window of `series` (tokens per bin) and its rate; None before any token.

    `ends_s`: when the requests completed (seconds from the series' start); batch means then
    end at completions (completion_edges); without them, every `batch_s`. `enough_batches`
    (a load that has ended): where the window holds fewer than MIN_BATCHES batches of
    `batch_s`, its interval comes from shorter ones (shorter_batches).
    """
    if len(series) == 0 or not series.any():
        return None
    batch_bins = max(1, round(batch_s / bin_s))
    observations = aggregate(series, MSER_BATCH_BINS)
    cut = mser_truncation(observations)
    settled = len(observations) >= TESTED_BATCHES and cut <= len(observations) // 2
    # An unsettled run never loses more than its first half: what it reports is then the
    # best it measured, flagged as unsettled.
    half = len(series) // 2
    first_bin = max(min(cut * MSER_BATCH_BINS, half), math.ceil(min_warmup_s / bin_s - 1e-9))

    def edges_from(first: int) -> np.ndarray:
        bins = len(series) - first
        if not ends_s:
            return fixed_edges(bins, batch_bins)
        shifted = [end - first * bin_s for end in ends_s]
        return completion_edges(shifted, bins=bins, batch_s=batch_s, bin_s=bin_s)

    # MSER misses a slow climb buried in noise (seen on the H200: a fresh LMDeploy launch at
    # concurrency 64 climbs for 20-30 s). While the window's batch rates still rise
    # significantly, its first batch is still warm-up.
    edges = edges_from(first_bin)
    while first_bin < half:
        moving = trend(_rates(series[first_bin:], edges, bin_s))
        if moving != "rising":
            settled = settled and moving is None
            break
        first_bin += int(edges[1])
        edges = edges_from(first_bin)
    else:
        settled = False
    steady = series[first_bin:]
    if len(steady) == 0:
        return None
    window_s = len(steady) * bin_s
    means = batch_means(steady, edges=edges, bin_s=bin_s, confidence=confidence)
    if enough_batches and len(means.rates) < MIN_BATCHES:
        means = shorter_batches(
            steady,
            means,
            batch_s,
            ends_s=ends_s,
            first_bin=first_bin,
            confidence=confidence,
            bin_s=bin_s,
        )
    return SteadyState(
        tokens_per_s=float(steady.sum()) / window_s,
        ci_rel=means.ci_rel,
        warmup_s=first_bin * bin_s,
        window_s=window_s,
        batches=len(means.rates),
        batch_s=means.batch_s,
        lag1=means.lag1,
        settled=settled,
        correlation_tested=means.correlation_tested,
        batch_rates=means.unmerged,
    )


def shorter_batches(
    steady: np.ndarray,
    means: BatchMeans,
    batch_s: float,
    *,
    ends_s: Sequence[float] | None,
    first_bin: int,
    confidence: float,
    bin_s: float = BIN_S,
) -> BatchMeans:
    """Batch means of the window `steady` (from `first_bin`), where `means`, of `batch_s`,
    were too few for an interval: batches of a TESTED_BATCHES-th of the window, at least
    MIN_BATCH_S, still ending at completions. A load its cap stopped after two or three long
    batches (slow requests, a budget's cap) has measured many more request cycles than that:
    shorter batches are correlated the more, which the merging and the AR(1) factor of
    batch_means weigh. Unchanged where even they are too few."""
    short_s = max(MIN_BATCH_S, len(steady) * bin_s / TESTED_BATCHES)
    if short_s >= batch_s:
        return means
    if ends_s:
        shifted = [end - first_bin * bin_s for end in ends_s]
        edges = completion_edges(shifted, bins=len(steady), batch_s=short_s, bin_s=bin_s)
    else:
        edges = fixed_edges(len(steady), max(1, round(short_s / bin_s)))
    shorter = batch_means(steady, edges=edges, bin_s=bin_s, confidence=confidence)
    return shorter if len(shorter.rates) >= MIN_BATCHES else means


def trend(rates: np.ndarray) -> str | None:
    """ "rising" or "falling" when the batch rates have a significant linear trend over the
    window (the slope's t-test); None when they have not, or are too few to say."""
    from scipy import stats  # here, not at the top: 0.8 s of import every command paid

    if len(rates) < TESTED_BATCHES or np.ptp(rates) == 0:
        return None
    fit = stats.linregress(np.arange(len(rates)), rates)
    if not fit.pvalue < TREND_LEVEL:
        return None
    return "rising" if fit.slope > 0 else "falling"
