"""When a load test has measured enough: the rate has settled and its interval is narrow.

A load runs at the trial's own concurrency from its first request: its warm-up is the start of
the same load, cut where the rate settles (autotune.measure.steady). The runner shows the rule
a snapshot of the load now and then; the rule stops it once

- the warm-up is over (one full turnover of the batch, and MSER's cut in the first half), and
- the steady window's interval lies within +-`target_ci_rel` of the rate, from at least
  TESTED_BATCHES batch means (their autocorrelation tested);

or, racing (a study's incumbent given), once the trial cannot win: its steady rate's interval
lies wholly below the incumbent's. A study recommends the best rate, and a later objective
only breaks ties between overlapping intervals (autotune.study.select.recommend), so such a
trial can no longer be recommended; the study spends its time on the contenders instead, and
keeps a loser's partial figures with the reason. The interval it is judged on
comes from at least MIN_BATCHES batch means of a settled rate: a warm-up still climbing never
stops a trial, and the replay benchmark (bench/cpu/replay.py) counts every stop it got wrong;

or when a cap is reached: `max_measure_s` of steady window, `max_load_s` of load in all
(warm-up included), or `max_requests`. A trial stopped by a cap says so; its interval is then
what was measured, however wide.

The steady-window cap waits for an interval: a window that holds fewer than MIN_BATCHES batch
means has none, and a figure without one cannot be compared or repeated. Slow requests make
long batches (two turnovers each): at 5 s a request, a 40 s window holds three. Such a load
goes on past `max_measure_s`, into the warm-up time it did not use, until its window has an
interval; `max_load_s` and `max_requests` still bound it, so no trial runs longer than before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.measure.steady import (
    BIN_S,
    MIN_BATCHES,
    TESTED_BATCHES,
    SteadyState,
    batch_seconds,
    steady_state,
)

CONVERGED = "converged"
RACED = "raced"
MAX_SECONDS = "max_seconds"
MAX_REQUESTS = "max_requests"
# How often a load keeps what the rule saw (`stop_rule_trail` of a result; grid.py writes it).
TRAIL_EVERY_S = 5.0


def first_round_end(ends: Sequence[float], *, start: float, min_requests: int) -> float:
    """Seconds from `start` until `min_requests` requests had completed (`ends` in order)."""
    if not ends or min_requests < 1:
        return 0.0
    return ends[min(min_requests, len(ends)) - 1] - start


@dataclass(frozen=True)
class LoadSnapshot:
    """A running load as the rule sees it."""

    series: np.ndarray  # tokens per BIN_S bin since the load began, whole bins up to now
    elapsed_s: float
    completed: int
    e2e_median_s: float | None  # of the completed requests; None before the first
    min_warmup_s: float | None  # the first round's turnover; None until it has finished
    ends_s: Sequence[float] = ()  # when the completed requests ended, from the load's start

    def estimate(self, confidence: float) -> SteadyState | None:
        if self.min_warmup_s is None or self.e2e_median_s is None:
            return None
        return steady_state(
            self.series,
            batch_s=batch_seconds(self.e2e_median_s),
            min_warmup_s=self.min_warmup_s,
            confidence=confidence,
            ends_s=self.ends_s,
            bin_s=BIN_S,
        )


@dataclass(frozen=True)
class RaceBound:
    """The incumbent a trial races: the low end of its throughput interval."""

    tokens_per_s_low: float
    # Figures of two launches differ by this much beyond their own intervals: a trial on
    # another launch than the incumbent's is judged on its interval widened by it.
    spread_rel: float = 0.0

    def beaten(self, estimate: SteadyState) -> bool:
        """Whether a load whose steady rate is `estimate` has lost to the incumbent."""
        # MIN_BATCHES, not TESTED_BATCHES: a loser by a wide margin is plain from four batch
        # means (Student's t with 3 degrees of freedom keeps a narrow one honest), and long
        # requests make long batches (eager mode at 32 in flight: 19 s each).
        if estimate.batches < MIN_BATCHES or not math.isfinite(estimate.ci_rel):
            return False
        ci_rel = math.hypot(estimate.ci_rel, self.spread_rel)
        return estimate.tokens_per_s * (1.0 + ci_rel) < self.tokens_per_s_low


@dataclass(frozen=True)
class SteadyRule:
    """When a load test stops (see the module docstring)."""

    target_ci_rel: float
    confidence: float
    max_measure_s: float
    max_load_s: float
    max_requests: int
    race: RaceBound | None = None

    def reason_to_stop(self, snapshot: LoadSnapshot) -> str | None:
        """CONVERGED, MAX_SECONDS or MAX_REQUESTS once the load may end; else None."""
        if snapshot.completed >= self.max_requests:
            return MAX_REQUESTS
        if snapshot.elapsed_s >= self.max_load_s:
            return MAX_SECONDS
        estimate = snapshot.estimate(self.confidence)
        if estimate is None or not estimate.settled:
            return None
        # Lost is lost, however narrow its interval: a loser needs no accuracy pass either.
        if self.race is not None and self.race.beaten(estimate):
            return RACED
        if estimate.batches >= TESTED_BATCHES and estimate.ci_rel <= self.target_ci_rel:
            return CONVERGED
        if estimate.window_s >= self.max_measure_s and math.isfinite(estimate.ci_rel):
            return MAX_SECONDS
        return None


def keep_trail(
    trail: list[dict[str, float | bool | str | None]],
    snapshot: LoadSnapshot,
    rule: SteadyRule,
    reason: str | None,
) -> None:
    """Append what `rule` saw to `trail` every TRAIL_EVERY_S of load, and at its stop."""
    if reason is not None or snapshot.elapsed_s >= TRAIL_EVERY_S * (len(trail) + 1):
        trail.append(trail_entry(snapshot, rule, reason))


def trail_entry(
    snapshot: LoadSnapshot, rule: SteadyRule, reason: str | None
) -> dict[str, float | bool | str | None]:
    """What the rule saw in `snapshot` and decided (`reason`): a load keeps one every
    TRAIL_EVERY_S, so a load that ran to its cap shows why it never converged."""
    estimate = snapshot.estimate(rule.confidence)
    entry: dict[str, float | bool | str | None] = {
        "elapsed_s": round(snapshot.elapsed_s, 2),
        "completed": snapshot.completed,
        "tokens_seen": round(float(snapshot.series.sum())),
        "stop": reason,
    }
    if estimate is not None:
        entry.update(
            settled=estimate.settled,
            warmup_s=round(estimate.warmup_s, 2),
            window_s=round(estimate.window_s, 2),
            tokens_per_s=round(estimate.tokens_per_s, 1),
            ci_rel=round(estimate.ci_rel, 4) if estimate.ci_rel < 1e9 else None,
            batches=estimate.batches,
            batch_s=round(estimate.batch_s, 2),
        )
    return entry
