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
load runs; the incumbent is not measured again: its launch is mostly gone, and the load could
change again while it measures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.engines.measurement import Measurement
from autotune.errors import StudyError
from autotune.measure.convergence import RaceBound
from autotune.measure.registry import THROUGHPUT
from autotune.measure.summary import with_launch_spread
from autotune.records.parts import Environment
from autotune.records.stored import TrialRecord
from autotune.space import SearchSpace
from autotune.study.results.groups import in_group
from autotune.study.results.select import front_top, objective_names, throughput_interval


@dataclass(frozen=True)
class Incumbent:
    number: int
    tokens_per_s: float
    bound: RaceBound

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
            f"{self.bound.tokens_per_s_low:.1f})"
        )


def incumbent(
    study: optuna.Study, space: SearchSpace, launch_id: str, group: str | None = None
) -> Incumbent | None:
    """The trial a sampled trial on launch `launch_id` of comparison group `group` races, or
    None: racing is off, the study ranks by something else first, or no feasible trial of the
    group with a throughput interval has finished.

    It is the top of the feasible front (the best throughput), not the recommendation: a
    trial tied with the top may be recommended for its latency (autotune.study.results.select), so
    only a trial whose interval lies below the top's is out of the running. On the top's own
    launch the two load tests' own intervals are compared, as `select.tied` compares them;
    on another, the top's recorded interval and the trial's, both widened by the spread
    between launches."""
    if not _raced(study, space):
        return None
    try:
        found = front_top(in_group(study, group))
    except StudyError:  # a deploy target not registered here: no incumbent to race
        return None
    if found is None:  # nothing feasible and deployable has finished yet
        return None
    top = found.top
    same_launch = TrialRecord.of(top).launch_id == launch_id
    interval = throughput_interval(top, same_launch=same_launch)
    if interval is None:  # too short for an interval: it ties with every trial
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
    )


def wall_clock_wait(environment: Environment) -> float:
    """The share of its runnable time a trial's engine waited for a core, as its figure
    carries it: none on the on-core clock, which left the wait out (and none recorded)."""
    on_core = (environment.clock or "").startswith("on-core")
    share = environment.engine_wait_share
    return 0.0 if on_core or share is None or not math.isfinite(share) else share


def awaits_first_figure(study: optuna.Study, space: SearchSpace, group: str | None = None) -> bool:
    """Whether a trial now would give comparison group `group` its first figure to race:
    racing is on, the study ranks by throughput first, and nothing feasible and deployable of
    the group has finished."""
    if not _raced(study, space):
        return False
    try:
        return front_top(in_group(study, group)) is None
    except StudyError:  # a deploy target not registered here: nothing will ever be raced
        return False


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
) -> tuple[dict[str, Any], str]:
    """What a trial stopped by racing records, and why it stopped: the figures measured until
    the race was lost, and the incumbent it lost to. It ends PRUNED (autotune.study.run.
    objective): the sampler learns the region is worse, and the time goes to the contenders."""
    m.environment = {**m.environment, "launch_id": launch_id}
    attrs = {key: value for key, value in m.user_attrs().items() if key != "time_s"}
    reason = rival.reason(trail[-1] if trail else {})
    return {**attrs, "raced_by": rival.number, "raced_reason": reason}, reason
