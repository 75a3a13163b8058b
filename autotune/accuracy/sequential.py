"""The accuracy floor as a sequential test: a trial answers as many items as its verdict needs.

A candidate answers the evaluation items in one fixed order (`decision_order`: every prefix a
category-proportional sample), a stage at a time. After each stage the floor looks at the
paired differences with the reference's answers on the same items and stops as soon as they
decide: *feasible* once the candidate is shown to lose less than `max_drop`, *infeasible* once
it is shown to lose more. A set that runs out first leaves the trial *undecided*, and so
infeasible: the floor never passes what it could not show.

Every look tests one confidence sequence for the mean paired difference, built by betting
(Waudby-Smith and Ramdas, JRSS B 86(1), 2024). The gambler's capital is a nonnegative
martingale under each candidate mean, so by Ville's inequality the floor may look after every
stage, screening included, and each verdict is still wrong with probability at most
1 - confidence over all its looks. Any bets chosen from the past alone keep that, so they are
chosen for power (a pass bets on a candidate that loses nothing, a rejection learns by online
Newton step), with no variance assumption; bench/cpu/floor_error_rates.py measures both error
rates. The bets are a few lines of numpy: the authors' package (`confseq`) needs Boost and a
C++ build.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Decision = Literal["feasible", "infeasible", "undecided"]
METHOD = "betting confidence sequence (Waudby-Smith & Ramdas 2024)"
# The largest bet, as a share of what keeps the capital positive (their c; 1/2 to 3/4).
BET_CAP = 0.75
GRID_POINTS = 801  # candidate means the reported interval is read off (steps of 0.0025)


@dataclass(frozen=True)
class FloorLook:
    """What one look at the paired differences shows."""

    decision: Decision
    n_items: int
    mean_diff: float  # candidate minus reference (or minus nothing, for an absolute floor)
    ci_low: float  # each end a one-sided bound at `confidence`, valid over all looks
    ci_high: float
    confidence: float


def _to_unit(values: np.ndarray, low: float, high: float) -> np.ndarray:
    return np.clip((values - low) / (high - low), 0.0, 1.0)


def _unit_point(value: float, low: float, high: float) -> float:
    """One mean (the margin, the expected mean) on the bets' unit scale."""
    return float(_to_unit(np.array([value]), low, high)[0])


# Online Newton step's learning-rate constant for bets on outcomes in [-1, 1] (Cutkosky and
# Orabona 2018, as used for testing by betting by Shekhar and Ramdas 2023).
ONS_RATE = 2 / (2 - math.log(3))
# The pass bets' prior on the spread of the differences around the expected mean: worth
# PRIOR_ITEMS items at a discordance of PRIOR_DISCORDANCE (the share of items where one of
# the two answers right and the other wrong), so the first bets are moderate whatever the
# first few items show. bench/cpu/floor_error_rates.py measured the choice.
PRIOR_ITEMS = 10.0
PRIOR_DISCORDANCE = 0.2
# The smallest edge a pass bet plays for (unit scale: 0.01 is 0.02 of accuracy), for means at
# or above the expected one, where the interval's lower end is read off.
MIN_EDGE = 0.01


def _ons_capital(x: np.ndarray, m: np.ndarray, sign: float, width: tuple[int, ...]) -> np.ndarray:
    """Log capital after each item (rows) of a gambler betting that the mean lies above
    (sign +1) or below (sign -1) `m`, each bet by online Newton step from the outcomes
    before it: within a logarithmic regret of the best constant (Kelly) bet in hindsight,
    whatever the differences do."""
    cap = BET_CAP / m if sign > 0 else BET_CAP / (1 - m)
    bet = np.zeros(width)
    curvature = np.ones(width)
    log_capital = np.zeros(width)
    rows = np.empty((len(x), *width))
    for t in range(len(x)):
        gain = sign * (x[t] - m)
        log_capital += np.log1p(bet * gain)
        rows[t] = log_capital
        slope = gain / (1 + bet * gain)
        curvature += slope**2
        bet = np.clip(bet + ONS_RATE * slope / curvature, 0.0, cap)
    return rows


def _pass_capital(
    x: np.ndarray, m: np.ndarray, expected: float, width: tuple[int, ...]
) -> np.ndarray:
    """Log capital after each item (rows) of a gambler betting that the mean lies above `m`,
    playing for the mean the candidate is expected to have when it passes (`expected`: a
    candidate that loses nothing) at the spread seen so far: the Kelly bet against that
    alternative, edge / (variance + edge^2), the variance a predictable plug-in (Waudby-Smith
    and Ramdas's predictable plug-in bets, their section 5, with the edge fixed instead of
    estimated). The edge is known from the floor's own question, so the bets need not learn
    it from noisy means: a candidate that answers as well passes in about as many items as a
    likelihood-ratio (SPRT) test that knew the spread, well under a fixed-size test that
    passes it as often."""
    edge = np.maximum(expected - m, MIN_EDGE)
    spread = np.full(width, PRIOR_ITEMS * PRIOR_DISCORDANCE / 4)  # unit scale: d / 2
    log_capital = np.zeros(width)
    rows = np.empty((len(x), *width))
    for t in range(len(x)):
        variance = spread / (PRIOR_ITEMS + t)
        bet = np.clip(edge / (variance + edge**2), 0.0, BET_CAP / m)
        log_capital += np.log1p(bet * (x[t] - m))
        rows[t] = log_capital
        spread += (x[t] - expected) ** 2
    return rows


def _log_capitals(
    x: np.ndarray, m: np.ndarray, expected: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Running maxima of log capital betting that the mean is above (`up`) and below
    (`down`) each candidate mean `m`, after each item (rows); `x` holds one sequence (n,),
    judged at every `m` (k,), or k sequences side by side (n, k), each at its own `m`.

    Every bet is chosen from the outcomes before it, so each capital is a nonnegative
    martingale under its hypothesis (Ville's inequality bounds its chance to ever reach
    1 / alpha by alpha), whatever the strategy. The upward bets play for `expected` when the
    floor knows what a passing candidate looks like (a relative floor: no loss), else by
    online Newton step, as the downward ones always do: a candidate that loses more than the
    margin can lose any amount, and those far past it decide in a few dozen items anyway.
    Bets are capped at BET_CAP of what keeps the capital positive.
    """
    m = np.clip(np.asarray(m, dtype=float), 1e-9, 1 - 1e-9)
    width = np.broadcast_shapes(m.shape, x.shape[1:])
    if expected is None:
        up = _ons_capital(x, m, 1.0, width)
    else:
        up = _pass_capital(x, m, expected, width)
    down = _ons_capital(x, m, -1.0, width)
    return np.maximum.accumulate(up, axis=0), np.maximum.accumulate(down, axis=0)


def look(
    diffs: Sequence[float],
    *,
    margin: float,
    confidence: float,
    low: float = -1.0,
    high: float = 1.0,
    expected: float | None = 0.0,
    with_interval: bool = True,
) -> FloorLook:
    """The floor's verdict on `diffs` so far (in decision order), each in [low, high].

    Feasible once the lower confidence sequence has risen above `margin` (for a relative
    floor, -max_drop), infeasible once the upper one has fallen below it, else undecided.
    Each is a one-sided test at 1 - `confidence` of the composite hypothesis on the other
    side of the margin, valid under optional stopping: the capital at the margin decides.
    `expected` is the mean of a candidate that should pass (a relative floor's: 0, no loss),
    which the pass bets play for; None (an absolute floor) leaves them to learn it.
    `with_interval` also reads both ends off a grid, for the trial's record (off in the
    error-rate benchmark, which needs only the verdicts).
    """
    values = np.asarray(diffs, dtype=float)
    n = len(values)
    if n == 0:
        return FloorLook("undecided", 0, math.nan, low, high, confidence)
    threshold = math.log(1 / (1 - confidence))
    x = _to_unit(values, low, high)
    at_margin = _unit_point(margin, low, high)
    target = None if expected is None else _unit_point(expected, low, high)
    up, down = _log_capitals(x, np.array([at_margin]), target)
    decision: Decision = "undecided"
    if up[-1, 0] >= threshold:
        decision = "feasible"
    elif down[-1, 0] >= threshold:
        decision = "infeasible"
    ci_low, ci_high = low, high
    if with_interval:
        ci_low, ci_high = _interval(x, threshold, decision, at_margin, target)
        ci_low, ci_high = (low + v * (high - low) for v in (ci_low, ci_high))
    return FloorLook(decision, n, float(values.mean()), ci_low, ci_high, confidence)


def _interval(
    x: np.ndarray, threshold: float, decision: Decision, at_margin: float, target: float | None
) -> tuple[float, float]:
    """Both one-sided bounds read off a grid (unit scale): the lower end is the first mean
    from below that the upward bets have not excluded, the upper end likewise from above.
    The ends are kept on the verdict's side of the margin, where the grid is coarser than
    the test at the margin itself."""
    grid = np.linspace(0.0, 1.0, GRID_POINTS)
    up, down = _log_capitals(x, grid, target)
    kept_below = np.flatnonzero(up[-1] < threshold)
    kept_above = np.flatnonzero(down[-1] < threshold)
    low_end = float(grid[kept_below[0]]) if kept_below.size else float(x.mean())
    high_end = float(grid[kept_above[-1]]) if kept_above.size else float(x.mean())
    if decision == "feasible":
        low_end = max(low_end, math.nextafter(at_margin, 1.0))
    elif decision == "infeasible":
        high_end = min(high_end, math.nextafter(at_margin, 0.0))
    return (low_end, max(low_end, high_end))


def paired_diffs(
    order: Sequence[str],
    candidate_scores: Mapping[str, float],
    reference_scores: Mapping[str, float],
) -> list[float]:
    """Candidate minus reference, item by item, in decision order, on the items both
    answered (a prefix of `order`: the stages answer it from the start)."""
    return [
        candidate_scores[i] - reference_scores[i]
        for i in order
        if i in candidate_scores and i in reference_scores
    ]


def stage_sizes(pool: int, *, first: int, batch: int = 1, growth: float = 1.5) -> list[int]:
    """How many items the floor has seen at each look: `first`, then growing by `growth`,
    each a whole number of batches, the last the whole pool."""
    batch = max(1, batch)
    sizes: list[int] = []
    size = max(1, first)
    while True:
        size = min(pool, math.ceil(size / batch) * batch)
        sizes.append(size)
        if size >= pool:
            return sizes
        size = max(size + batch, math.ceil(size * growth))


def items_to_decide(
    diffs: np.ndarray | Sequence[float],
    *,
    margin: float,
    confidence: float,
    expected: float | None = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """For each sequence (column of `diffs`, or `diffs` itself), the verdict and the item
    count at which a floor looking after every item would give it (undecided: the sequence's
    length). One pass over the items for all sequences at once: what `look` decides at
    each prefix."""
    values = np.asarray(diffs, dtype=float)
    single = values.ndim == 1
    values = values.reshape(len(values), -1)
    n = len(values)
    threshold = math.log(1 / (1 - confidence))
    at_margin = _unit_point(margin, -1.0, 1.0)
    target = None if expected is None else _unit_point(expected, -1.0, 1.0)
    x = _to_unit(values, -1.0, 1.0)
    up, down = _log_capitals(x, np.full(values.shape[1], at_margin), target)
    first_pass = np.where((up >= threshold).any(axis=0), (up >= threshold).argmax(axis=0), n)
    first_fail = np.where((down >= threshold).any(axis=0), (down >= threshold).argmax(axis=0), n)
    verdicts = np.where(
        first_pass < first_fail,
        "feasible",
        np.where(first_fail < first_pass, "infeasible", "undecided"),
    )
    counts = np.minimum(np.minimum(first_pass, first_fail) + 1, n)
    if single:
        return verdicts[0], counts[0]
    return verdicts, counts


def planted_diffs(
    rng: np.random.Generator, n: int, *, drop: float, discordance: float
) -> np.ndarray:
    """Paired differences of a candidate that loses `drop` on average and answers unlike the
    reference (one right, the other wrong) on a `discordance` share of items."""
    if drop > discordance:
        raise ValueError(f"a drop of {drop} needs a discordance of at least as much")
    candidate_wins = (1 - drop / discordance) / 2 if discordance else 0.0
    discordant = rng.random(n) < discordance
    sign = np.where(rng.random(n) < candidate_wins, 1.0, -1.0)
    return np.where(discordant, sign, 0.0)


def items_needed_to_pass(
    *, max_drop: float, confidence: float, discordance: float, draws: int = 200, cap: int = 20_000
) -> tuple[float, float, float]:
    """Items the sequential floor spends to pass a candidate exactly as accurate as the
    reference that answers differently on a `discordance` share of items: the median, the
    90th percentile (a set that large passes it 9 times in 10) and the share passed by `cap`."""
    rng = np.random.default_rng(0)
    diffs = np.stack(
        [planted_diffs(rng, cap, drop=0.0, discordance=discordance) for _ in range(draws)], axis=1
    )
    verdicts, counts = items_to_decide(diffs, margin=-max_drop, confidence=confidence)
    spent = np.where(verdicts == "feasible", counts, cap * 10)
    return (
        float(np.median(spent)),
        float(np.percentile(spent, 90)),
        float(np.mean(verdicts == "feasible")),
    )
