"""When a load test has measured enough: the rate has settled and its interval is narrow.

A load runs at the trial's own concurrency from its first request; its warm-up is the start of
the same load, cut where the rate settles (autotune.measure.steady). The rule stops it once

- the warm-up is over (one full turnover of the batch, and MSER's cut in the first half), and
- the steady window's interval lies within +-`target_ci_rel` of the rate, from at least
  TESTED_BATCHES batch means (their autocorrelation tested);

or, racing (a study's incumbent given), once the trial cannot win: its steady rate's interval
(at RACE_CONFIDENCE, widened by the spread between launches, from at least MIN_BATCHES batch
means of a settled rate) lies wholly below the incumbent's. A later objective only breaks ties
inside that interval (autotune.study.results.select.tied), so such a trial can no longer be
recommended; its partial figures are kept with the reason. A warm-up still climbing never
stops a trial;

or when a cap is reached: `max_measure_s` of steady window, `max_load_s` of load in all, or
`max_requests`, the interval then being what was measured. The steady-window cap waits for an
interval (a figure without one cannot be compared): a load of slow requests runs on into the
warm-up time it did not use, still bounded by `max_load_s` and `max_requests`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.measure.steady import (
    BIN_S,
    MAX_LAG1,
    MIN_BATCHES,
    TESTED_BATCHES,
    SteadyState,
    batch_seconds,
    steady_state,
)
from autotune.measure.timing import RequestTiming

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
    # The share of its runnable time the engine waited for a core so far, on a wall clock
    # (autotune.measure.cpu_load); None: not measured (the on-core clock leaves it out).
    wait_share: float | None = None

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


# A racing trial's interval: its upper end at this confidence must lie below the incumbent's
# lower end. The rule looks many times a load, the incumbent is the best of many noisy figures
# (so read high), and a launch's rate swings in waves; the replay benchmark (bench/cpu/replay.py,
# 20 seeds) raced configurations as fast as their rival at the measuring rule's 95%.
RACE_CONFIDENCE = 0.99
# Below TESTED_BATCHES batch means (before merging) their correlation is not tested:
# their interval is widened as if it were the strongest the batch means allow (MAX_LAG1), so
# only a wide margin stops a trial that early (an eager launch, four times slower, whose
# requests make 20-second batches and would not reach TESTED_BATCHES in its measuring cap).
UNTESTED_WIDENING = math.sqrt((1 + MAX_LAG1) / (1 - MAX_LAG1))
# A wait share past this is taken as this: an engine that waits for nearly all of its time
# gives no pace to scale by, and such a race is widened twentyfold.
MAX_WAIT_SHARE = 0.95


@dataclass(frozen=True)
class RaceBound:
    """The incumbent a trial races: the low end of its throughput interval."""

    tokens_per_s_low: float
    # Figures of two launches differ by this much beyond their own intervals (a half-width at
    # the rule's confidence): a racing trial is judged on its interval widened by it.
    spread_rel: float = 0.0
    # The share of its runnable time the incumbent's engine waited for a core, on a wall
    # clock (autotune.measure.cpu_load; 0 on the on-core clock, which leaves the wait out).
    wait_share: float = 0.0

    def slowed_by(self, wait_share: float | None) -> float:
        """How much more a racing load's engine that waits `wait_share` of its runnable time
        may have been slowed than the incumbent's (1: no more). On a wall clock a CPU-bound
        engine runs at 1 - share of its idle pace, so the other load on the machine, not the
        configuration, may be all that puts it below the incumbent."""
        if wait_share is None or wait_share <= self.wait_share:
            return 1.0
        return (1.0 - min(self.wait_share, MAX_WAIT_SHARE)) / (
            1.0 - min(wait_share, MAX_WAIT_SHARE)
        )

    def beaten(
        self, estimate: SteadyState, confidence: float, wait_share: float | None = None
    ) -> bool:
        """Whether a load whose steady rate is `estimate` (its interval at `confidence`) has
        lost to the incumbent, its engine having waited `wait_share` of its runnable time
        for a core (None: not measured)."""
        if estimate.batches < MIN_BATCHES or not math.isfinite(estimate.ci_rel):
            return False
        from scipy import stats  # here, not at the top: 0.8 s of import every command paid

        df = estimate.batches - 1
        widen_t = stats.t.ppf(0.5 + RACE_CONFIDENCE / 2, df) / stats.t.ppf(0.5 + confidence / 2, df)
        if not estimate.correlation_tested:
            widen_t *= UNTESTED_WIDENING
        widen_z = stats.norm.ppf(0.5 + RACE_CONFIDENCE / 2) / stats.norm.ppf(0.5 + confidence / 2)
        ci_rel = math.hypot(estimate.ci_rel * widen_t, self.spread_rel * widen_z)
        upper = estimate.tokens_per_s * (1.0 + ci_rel) * self.slowed_by(wait_share)
        return upper < self.tokens_per_s_low


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
        """CONVERGED, RACED, MAX_SECONDS or MAX_REQUESTS once the load may end; else None."""
        cap = None
        if snapshot.completed >= self.max_requests:
            cap = MAX_REQUESTS
        elif snapshot.elapsed_s >= self.max_load_s:
            cap = MAX_SECONDS
        estimate = snapshot.estimate(self.confidence)
        settled = estimate is not None and estimate.settled
        # Lost is lost, however narrow its interval, and at a cap too: a loser needs no
        # accuracy pass either.
        race = self.race
        if (
            settled
            and race is not None
            and race.beaten(estimate, self.confidence, snapshot.wait_share)
        ):
            return RACED
        if cap is not None:
            return cap
        if estimate is None or not settled:
            return None
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
    on_entry: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Append what `rule` saw to `trail` every TRAIL_EVERY_S of load, and at its stop;
    `on_entry` is shown each entry as it is kept (the trial's running estimate)."""
    if reason is not None or snapshot.elapsed_s >= TRAIL_EVERY_S * (len(trail) + 1):
        trail.append(trail_entry(snapshot, rule, reason))
        if on_entry is not None:
            on_entry(dict(trail[-1]))


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
    if snapshot.wait_share is not None:
        entry["wait_share"] = round(snapshot.wait_share, 3)
    return entry


@dataclass
class StopRuleMonitor:
    """One load test's stop rule, looked at while the load runs. Every load loop (the HTTP
    client's, autotune.client.load; the in-process worker's static batches; the replay
    benchmark's simulated engine) tells it the same two things: each request as it completes
    (`completed`, drained ones too) and when the batch's first round has turned over
    (`turned_over`, by the loop's own count of its rounds). From them it keeps the warm-up
    floor, the snapshot it shows the rule and the trail, and the floor the load records
    (`min_warmup_s`): each worked out here alone."""

    rule: SteadyRule
    start: float  # when the load began, on the loop's clock
    min_requests: int  # completed requests the warm-up holds at least
    on_estimate: Callable[[dict[str, Any]], None] | None = None
    trail: list[dict[str, float | bool | str | None]] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)  # of the completed requests, as they came
    e2e_s: list[float] = field(default_factory=list)  # their latencies, in the same order
    turnover_s: float | None = None  # from `start`; None while the first round runs
    # The engine's wait share for a core since the load began (autotune.measure.cpu_load), read
    # for racing on a wall clock; None: not read.
    load: Callable[[], float | None] | None = None

    def completed(self, timing: RequestTiming) -> None:
        """A request of the load has completed (in the order they complete)."""
        self.ends.append(timing.end)
        self.e2e_s.append(timing.e2e_s)

    def turned_over(self, at: float) -> None:
        """The batch's first round turned over at `at` (the loop's clock); a later call
        changes nothing."""
        if self.turnover_s is None:
            self.turnover_s = at - self.start

    @property
    def warmup_floor_s(self) -> float | None:
        """The shortest warm-up, from `start`: until the first round has turned over (None
        while it has not, and so is the floor) and `min_requests` requests have completed."""
        if self.turnover_s is None:
            return None
        first = first_round_end(self.ends, start=self.start, min_requests=self.min_requests)
        return max(self.turnover_s, first)

    @property
    def min_warmup_s(self) -> float:
        """The floor the load records, once its requests have drained: 0 when its first round
        never turned over (a cap of fewer requests than the batch)."""
        return self.warmup_floor_s or 0.0

    def look(
        self, *, now: float, series: np.ndarray, on_stop: Callable[[str], None] | None = None
    ) -> str | None:
        """Why the load stops now, or None. `series`: its tokens per BIN_S bin from `start`
        to `now`. `on_stop`: told the reason before the trail is kept (a concurrent loop stops
        starting requests at once)."""
        snapshot = self._snapshot(now, series)
        reason = self.rule.reason_to_stop(snapshot)
        if reason is not None and on_stop is not None:
            on_stop(reason)
        keep_trail(self.trail, snapshot, self.rule, reason, self.on_estimate)
        return reason

    def stopped_by_the_loop(self, reason: str, *, now: float, series: np.ndarray) -> None:
        """The loop ended the load itself (the HTTP client stops starting requests at its
        request cap, before the rule has looked at the last of them): keep the trail's stop
        entry, and show it as the last running estimate, as `look` does for the rule's own
        stops. Once the trail has its stop entry, this keeps nothing."""
        if self.trail and self.trail[-1].get("stop") is not None:
            return
        keep_trail(self.trail, self._snapshot(now, series), self.rule, reason, self.on_estimate)

    def _snapshot(self, now: float, series: np.ndarray) -> LoadSnapshot:
        return LoadSnapshot(
            series=series,
            elapsed_s=now - self.start,
            completed=len(self.ends),
            e2e_median_s=statistics.median(self.e2e_s) if self.e2e_s else None,
            min_warmup_s=self.warmup_floor_s,
            ends_s=[end - self.start for end in self.ends],
            wait_share=self.load() if self.load is not None and self.rule.race else None,
        )
