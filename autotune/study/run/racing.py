"""Racing: a trial that cannot beat the study's best stops measuring at once.

The trial it races is the top of the feasible front: the best throughput among the trials
that meet every constraint. The recommendation is the best throughput, a later objective
(p95 latency, say) breaking ties only (autotune.study.results.select.tied), so a trial whose
throughput interval lies wholly below the top's can no longer be recommended. The stop rule
(autotune.measure.convergence) ends such a load as soon as that is known; the trial is then
PRUNED, with its partial figures and the reason, and never reaches the accuracy pass. The
reference (every other trial is judged against it) and the named candidates (what the user
asked to see) are never raced, and a study whose first objective is not throughput is not
raced at all. A trial races only its own comparison group's top (autotune.study.results.groups):
a figure measured on another machine says nothing of this one's.

On a busy CPU racing would compare moments: the racing load, timed on the wall clock, may run
beside more load than the incumbent's did. Its bound is widened by the change in the engine's
wait for a core between the two (autotune.measure.cpu_load, RaceBound.slowed_by), read as the
load runs; that model of the slowdown is only rough, so a stop of a load that waited for a core
is checked too: the incumbent is measured again on the same launch right after, beside the same
load, and the stop kept only if the trial still lies below it (checked_stop).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.engines import EngineSession, measure_plan
from autotune.engines.measurement import Measurement
from autotune.engines.session import EstimateCallback, MeasurePlan, PhaseCallback
from autotune.errors import StudyError
from autotune.measure.convergence import RACED, RaceBound
from autotune.measure.registry import THROUGHPUT
from autotune.measure.steady import SteadyState
from autotune.measure.summary import load_state, with_launch_spread
from autotune.params import TrialConfig
from autotune.records import SessionResult
from autotune.records.parts import Environment, RaceCheck, with_entries
from autotune.records.stored import TrialRecord
from autotune.space import SearchSpace
from autotune.study.results.groups import in_group
from autotune.study.results.select import front_top, objective_names, throughput_interval

# A racing load whose engine waited for a core less than this share of its runnable time ran
# at about its idle pace, and load only ever slowed the incumbent's recorded figure: its stop
# stands unchecked (an idle machine, a GPU engine, an endpoint, the replay benchmark).
QUIET_WAIT_SHARE = 0.05


@dataclass(frozen=True)
class Incumbent:
    number: int
    tokens_per_s: float
    bound: RaceBound
    # Its configuration, to measure it again on a racing trial's launch (checked_stop); None
    # where its record holds none.
    config: TrialConfig | None = None
    check: RaceCheck | None = None  # a stop against it, checked (checked_stop)

    def reason(self, decided_on: dict[str, Any]) -> str:
        """Why a trial lost, from the stop rule's estimate it was judged on (`decided_on`: the
        trail's last entry), which can differ a little from its recorded figure (the whole
        load's, summarised once it stopped)."""
        rate, ci_rel = decided_on.get("tokens_per_s"), decided_on.get("ci_rel")
        elapsed = decided_on.get("elapsed_s")
        figure = f"{rate:.1f}" if isinstance(rate, int | float) else "-"
        interval = f" ±{ci_rel:.1%}" if isinstance(ci_rel, float) and math.isfinite(ci_rel) else ""
        after = f" after {elapsed:.0f} s of load" if isinstance(elapsed, int | float) else ""
        return (
            f"stopped by racing{after}: {figure}{interval} tok/s lies below trial "
            f"{self.number}'s {self.tokens_per_s:.1f} tok/s (interval from "
            f"{self.bound.tokens_per_s_low:.1f}){self._checked()}"
        )

    def _checked(self) -> str:
        """The check of the stop in words, with the load each side saw; '' where none."""
        check = self.check
        if check is None or check.incumbent_tokens_per_s is None:
            return ""
        mine, theirs = check.wait_share or 0.0, check.incumbent_wait_share or 0.0
        return (
            f"; measured again right after, beside the same load, trial {self.number} gave "
            f"{check.incumbent_tokens_per_s:.1f} tok/s (the engine waited {mine:.0%} of its "
            f"time for a core in this load, {theirs:.0%} in trial {self.number}'s)"
        )


@dataclass(frozen=True)
class Race:
    """What a trial on a launch races: `rival`, the incumbent (None: nothing to race), and
    whether the trial would give its comparison group its `first_figure` to race."""

    rival: Incumbent | None
    first_figure: bool


def race_for(
    study: optuna.Study,
    space: SearchSpace,
    launch_id: str,
    group: str | None = None,
    *,
    raced: bool = True,
) -> Race:
    """The race of a trial on launch `launch_id` of comparison group `group`, from one read of
    the study's front. No rival when racing is off, the study ranks by something else first,
    the trial is not `raced` (the reference, the baseline), or no feasible trial of the group
    with a throughput interval has finished; the first figure when racing is on and nothing
    feasible and deployable of the group has finished.

    The rival is the top of the feasible front (the best throughput), not the recommendation:
    a trial tied with the top may be recommended for its latency
    (autotune.study.results.select), so only a trial whose interval lies below the top's is out
    of the running. On the top's own launch the two load tests' own intervals are compared, as
    `select.tied` compares them; on another, the top's recorded interval and the trial's, both
    widened by the spread between launches."""
    if not _raced(study, space):
        return Race(None, first_figure=False)
    try:
        found = front_top(in_group(study, group))
    except StudyError:  # a deploy target not registered here: nothing will ever be raced
        return Race(None, first_figure=False)
    if found is None:  # nothing feasible and deployable has finished yet
        return Race(None, first_figure=True)
    return Race(_incumbent(found.top, space, launch_id) if raced else None, first_figure=False)


def incumbent(
    study: optuna.Study, space: SearchSpace, launch_id: str, group: str | None = None
) -> Incumbent | None:
    """The trial a sampled trial on launch `launch_id` of comparison group `group` races, or
    None (race_for says when)."""
    return race_for(study, space, launch_id, group).rival


def _incumbent(top: FrozenTrial, space: SearchSpace, launch_id: str) -> Incumbent | None:
    """`top` as the incumbent a trial on launch `launch_id` races; None when it is too short
    for an interval (it ties with every trial)."""
    same_launch = TrialRecord.of(top).launch_id == launch_id
    interval = throughput_interval(top, same_launch=same_launch)
    if interval is None:
        return None
    record = TrialRecord.of(top)
    return Incumbent(
        number=top.number,
        tokens_per_s=record.figure(THROUGHPUT) or 0.0,
        bound=RaceBound(
            tokens_per_s_low=interval[0],
            spread_rel=0.0 if same_launch else spread_of(space),
            wait_share=wall_clock_wait(record.environment),
        ),
        config=record.trial_config() if record.config else None,
    )


def wall_clock_wait(environment: Environment) -> float:
    """The share of its runnable time a trial's engine waited for a core, as its figure
    carries it: none on the on-core clock, which left the wait out (and none recorded)."""
    on_core = (environment.clock or "").startswith("on-core")
    share = environment.engine_wait_share
    return 0.0 if on_core or share is None or not math.isfinite(share) else share


def _raced(study: optuna.Study, space: SearchSpace) -> bool:
    """Whether the study races its trials: racing is on and it ranks by throughput first."""
    names = objective_names(study)
    return space.workload.racing and bool(names) and names[0] == THROUGHPUT


def spread_of(space: SearchSpace) -> float:
    """The share a relaunch may move a figure by, as a half-width at the space's confidence:
    what a racing trial's own interval lacks next to the incumbent's recorded one."""
    workload = space.workload
    return with_launch_spread(0.0, workload.launch_spread_rel, workload.ci_confidence)


def raced_attrs(
    m: Measurement, rival: Incumbent, launch_id: str, trail: list[dict[str, Any]]
) -> tuple[TrialRecord, str]:
    """What a trial stopped by racing records, and why it stopped: the figures measured until
    the race was lost, and the incumbent it lost to. It ends PRUNED (autotune.study.run.
    objective): the sampler learns the region is worse, and the time goes to the contenders."""
    m.environment = with_entries(m.environment, launch_id=launch_id)
    record = m.user_attrs().untimed()
    reason = rival.reason(trail[-1] if trail else {})
    if rival.check is not None:  # the stop, checked against the incumbent measured again
        record = record.joined(TrialRecord.part(race_check=rival.check))
    raced = TrialRecord.part(raced_by=rival.number, raced_reason=reason)
    return record.joined(raced), reason


def measure_racing(
    session: EngineSession,
    space: SearchSpace,
    config: TrialConfig,
    plan: MeasurePlan,
    rival: Incumbent | None,
    on_phase: PhaseCallback | None = None,
    on_estimate: EstimateCallback | None = None,
) -> tuple[SessionResult, Incumbent | None]:
    """`config` measured under `plan` (racing `rival`, if any), a racing stop checked
    (checked_stop): its result, and the rival carrying the check."""
    result = session.measure(config, plan, on_phase=on_phase, on_estimate=on_estimate)
    if rival is None:
        return result, None
    return checked_stop(
        session, space, config, plan, result, rival, on_phase=on_phase, on_estimate=on_estimate
    )


def checked_stop(
    session: EngineSession,
    space: SearchSpace,
    config: TrialConfig,
    plan: MeasurePlan,
    result: SessionResult,
    rival: Incumbent,
    *,
    on_phase: PhaseCallback | None = None,
    on_estimate: EstimateCallback | None = None,
) -> tuple[SessionResult, Incumbent]:
    """`result` of `config` measured under `plan`, its racing stop kept only if it holds
    against the incumbent measured now, and the rival carrying that check (RaceCheck).

    A load that waited for a core may have lost to the load beside it, not to the incumbent:
    where its engine waited QUIET_WAIT_SHARE or more and this launch runs the incumbent's
    configuration, the incumbent is measured again here at once, for as long as the racing load
    ran, so both saw the same machine. The stop stands only if the racing load's interval still
    lies below that figure's (RaceBound.beaten, at racing's confidence); else it is withdrawn
    and `config` measured in full, unraced, accuracy pass included (`on_phase` and
    `on_estimate` as for its first load). Anything else is returned as it came."""
    if not _checkable(session, result, rival):
        return result, rival
    assert rival.config is not None  # _checkable
    if on_phase is not None:
        on_phase(f"racing check: trial {rival.number} measured again")
    again = measure_plan(space, rival.config, accuracy_ids=None, max_seconds=result.load_s)
    now = session.measure(rival.config, again, on_phase=None)
    rival = dataclasses.replace(rival, check=check_stop(space, result, now, rival))
    if rival.check is not None and rival.check.kept:
        return result, rival
    unraced = plan.model_copy(update={"race": None})
    return session.measure(config, unraced, on_phase=on_phase, on_estimate=on_estimate), rival


def _checkable(session: EngineSession, result: SessionResult, rival: Incumbent) -> bool:
    """Whether a stop is checked: racing stopped a load that waited for a core, on a launch
    that runs the incumbent's configuration (another launch's would have to start again)."""
    return (
        result.stop_reason == RACED
        and rival.config is not None
        and rival.config.launch_key() == session.launch_key
        and wall_clock_wait(Environment.of(result.environment)) >= QUIET_WAIT_SHARE
    )


def check_stop(
    space: SearchSpace, raced: SessionResult, now: SessionResult, rival: Incumbent
) -> RaceCheck:
    """The `raced` load against `rival` measured `now`, both on one launch (no spread between
    launches): the stop is kept only where the fresh load has a settled interval and the
    raced one's still lies wholly below it, each widened as a race widens it (RaceBound).
    Anything less is no evidence that the trial lost, and a withdrawn stop costs a full
    measurement, never a wrong recommendation."""
    confidence = space.workload.ci_confidence
    mine, theirs = _state(raced, confidence), _state(now, confidence)
    my_wait = wall_clock_wait(Environment.of(raced.environment))
    their_wait = wall_clock_wait(Environment.of(now.environment))
    kept = bool(
        mine is not None
        and mine.settled
        and theirs is not None
        and theirs.settled
        and math.isfinite(theirs.ci_rel)
        and RaceBound(theirs.ci_low, wait_share=their_wait).beaten(mine, confidence, my_wait)
    )
    return RaceCheck(
        incumbent=rival.number,
        kept=kept,
        tokens_per_s=_finite(None if mine is None else mine.tokens_per_s),
        ci_rel=_finite(None if mine is None else mine.ci_rel),
        wait_share=my_wait,
        incumbent_tokens_per_s=_finite(None if theirs is None else theirs.tokens_per_s),
        incumbent_ci_rel=_finite(None if theirs is None else theirs.ci_rel),
        incumbent_wait_share=their_wait,
        incumbent_measured_s=_finite(now.load_s),
        recorded_tokens_per_s=_finite(rival.tokens_per_s),
        recorded_wait_share=rival.bound.wait_share,
    )


def _state(result: SessionResult, confidence: float) -> SteadyState | None:
    return load_state(
        result.timings,
        load_start=result.load_start,
        load_stop=result.load_stop,
        min_warmup_s=result.min_warmup_s,
        confidence=confidence,
    )


def _finite(value: float | None) -> float | None:
    """A figure a record can hold, as a plain float: none for one not known (an interval too
    short to have a width)."""
    return float(value) if value is not None and math.isfinite(value) else None
