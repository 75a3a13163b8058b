"""What a trial measures: its configuration, and its load test planned as its role needs.

The plan is made once the trial's launch is up (racing compares on that launch, the budget
counts its start-up), asking each room once, and writes nothing: the objective records what
it says (autotune.study.run.objective). A reference the deploy target cannot run
(transformers beside LMDeploy) is never recommended: its speed only feeds the "x the
reference" figure, so its load test stops at +-10% or after a short window, and the next
launch starts beside it (autotune.study.run.launches), where a slow start-up hides behind the
reference's own. The study's first deployable figure only has to be good enough to race, so
it stops at +-FIRST_FIGURE_TARGET_CI_REL and its record says `first_figure`.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from autotune.backends import BACKENDS
from autotune.engines.session import MeasurePlan, measure_plan
from autotune.errors import TrialFailure
from autotune.params import TrialConfig
from autotune.records.stored import TrialRecord
from autotune.space import SearchSpace
from autotune.space.engine_defaults import baseline_config
from autotune.study.plan import StudyPlan
from autotune.study.proposals.queueing import next_queued_launch
from autotune.study.run.budget import Budget
from autotune.study.run.racing import Incumbent, Race, race_for
from autotune.study.run.twins import AnswersPlan, accuracy_args

REFERENCE_TARGET_CI_REL = 0.10
FIRST_FIGURE_TARGET_CI_REL = 0.06


@dataclass(frozen=True)
class Proposal:
    """The configuration a trial measures, and the role it was queued for."""

    config: TrialConfig
    output_key: str
    is_reference: bool
    sampled: bool  # the sampler's (not the reference or a named candidate): it may repeat one
    # The deploy target's defaults: the figure gains are measured against, so never raced.
    baseline: bool = False


@dataclass(frozen=True)
class RolePlan:
    """What the trial's session is asked (`measure`), the trial it races (`rival`: None for
    none) and whether it gives the study its first deployable figure."""

    measure: MeasurePlan
    rival: Incumbent | None
    first_figure: bool


def queued_config(space: SearchSpace, record: TrialRecord) -> TrialConfig | None:
    """The configuration a trial was queued as: the reference's, the deploy target's defaults
    or a named candidate's; None for the sampler's. TrialFailure for a name this run's space
    no longer has (its configuration is unknown here)."""
    if record.is_reference:
        return space.reference_config()
    if record.baseline:
        fixed = baseline_config(space)
        if fixed is None:
            reason = "the baseline was queued by an earlier run whose space deploys elsewhere"
            raise TrialFailure(reason, kind="error")
        return fixed
    if not record.candidate:
        return None
    candidate = str(record.candidate)
    if space.find_candidate(candidate) is None:
        raise TrialFailure(
            f"named candidate {candidate!r} was queued by an earlier run and is in "
            "neither this run's space nor its --enqueue file",
            kind="error",
        )
    return space.candidate_config(candidate)


def only_a_baseline(space: SearchSpace, config: TrialConfig, *, endpoint: str | None) -> bool:
    """Whether the reference `config` can never be recommended: the deploy target runs
    another engine (an endpoint study's reference is that server's own)."""
    backend = BACKENDS.get(space.deploy) if endpoint is None else None
    return backend is not None and config.backend not in backend.deploys


def launch_beside(plan: StudyPlan, study: optuna.Study, proposal: Proposal) -> TrialConfig | None:
    """The launch to start beside this trial's: the next queued one, beside a reference that
    only feeds the "x" figure (its speed is a what-if; the next one may be deployed)."""
    if not proposal.is_reference or not only_a_baseline(
        plan.space, proposal.config, endpoint=plan.endpoint
    ):
        return None
    return next_queued_launch(study, plan)


def plan_measure(
    plan: StudyPlan,
    study: optuna.Study,
    proposal: Proposal,
    answers: AnswersPlan,
    *,
    launch_id: str,
    budget: Budget,
    used_s: float,
) -> RolePlan:
    """The load test of `proposal` on launch `launch_id`, after `used_s` of the trial: the
    space's plan with the accuracy pass `answers` asks for, the race and the time the budget
    leaves. The reference is never raced (every trial is judged against it), nor the baseline;
    a named candidate that can no longer tie the front is raced like any trial. The reference
    that is only a baseline stops early; the first deployable figure stops at the looser
    target; every other trial keeps the space's plan."""
    space, config = plan.space, proposal.config
    race = Race(None, first_figure=False)
    if not proposal.is_reference:
        race = race_for(study, space, launch_id, plan.group, raced=not proposal.baseline)
    measure = measure_plan(
        space,
        config,
        **accuracy_args(plan, answers),
        race=race.rival.bound if race.rival else None,
        max_seconds=budget.measure_seconds(study, used_s=used_s, accuracy=answers.spends_accuracy),
    )
    if proposal.is_reference and only_a_baseline(space, config, endpoint=plan.endpoint):
        measure = reference_plan(measure, max_s=space.workload.reference_max_s)
    elif race.first_figure:
        measure = first_figure_plan(measure)
    return RolePlan(measure, race.rival, race.first_figure)


def reference_plan(plan: MeasurePlan, *, max_s: float) -> MeasurePlan:
    """`plan` with the reference's looser stop rule, its load (warm-up and window together)
    at most `max_s` (never longer than the plan's). Its window may then be too short for an
    interval, or the load for a window at all (a slow engine at batch 1): it is context only,
    its rate then read after its first request; the figure says so ("no interval"), and only
    the "x" figure reads it."""
    return plan.model_copy(
        update={
            "target_ci_rel": max(plan.target_ci_rel, REFERENCE_TARGET_CI_REL),
            "max_measure_s": min(plan.max_measure_s, max_s),
            "max_load_s": min(plan.max_load_s, max_s),
            "context_only": True,
        }
    )


def first_figure_plan(plan: MeasurePlan) -> MeasurePlan:
    """`plan` for the study's first deployable figure, the incumbent its first steps race."""
    return plan.model_copy(
        update={"target_ci_rel": max(plan.target_ci_rel, FIRST_FIGURE_TARGET_CI_REL)}
    )
