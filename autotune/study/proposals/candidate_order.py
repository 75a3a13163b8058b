"""When the named candidates after the first are measured: once a one-lever step has beaten
the first, or the steps leave its launch.

The first named candidate is the study's first deployable launch (after the reference), and
the one-lever steps (autotune.study.proposals.steps) start from its figure. On the H200 the second
candidate (the guide's recipe, on the same launch and as fast as the first) took 100-200 s
before the first step, and the step that found the best (images at 512 px) ran at minute 9.
So with steps on, a run queues the reference and the first candidate; the others are queued
as soon as a step has beaten the first (they are then raced against the front like any
trial, autotune.study.run.racing, and a loser stops within seconds), or when no request-time step
on the running launch is left, and in any case before a launch step leaves that launch.
"""

from __future__ import annotations

import optuna

from autotune.records.stored import TrialRecord
from autotune.study.plan import StudyPlan
from autotune.study.proposals.steps import Step


def candidates_now(plan: StudyPlan) -> int | None:
    """How many named candidates a run queues before its trials: one when the steps follow
    the first, None (all of them) otherwise."""
    return 1 if plan.space.sampler.steps else None


def later_candidates_due(study: optuna.Study, step: Step | None) -> bool:
    """Whether the candidates held back may be queued now: the first has ended, and the next
    proposal (`step`, the scheduler's) leaves the running launch, is the sampler's, or steps
    from a trial that is no named candidate (a step has beaten the first)."""
    trials = study.get_trials(deepcopy=False)
    if not any(TrialRecord.of(t).candidate and t.state.is_finished() for t in trials):
        return False  # nothing deployable has a figure yet: no step to start from
    if step is None or step.new_launch:
        return True
    base = next((t for t in trials if t.number == step.from_trial), None)
    return base is None or TrialRecord.of(base).candidate is None
