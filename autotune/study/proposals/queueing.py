"""Queueing the reference, the named candidates and the baseline, once each.

Every trial is judged against the reference, so a study without a completed reference
measures it first. A reference queued again after an interrupted run would sit behind the
candidates that run had queued: those are ended "not run" and queued again behind it, as
Optuna's RetryFailedTrialCallback queues a copy of a failed trial. Several processes may queue
at once: each checks the storage after it has queued and ends a waiting copy of anything already
queued, running or measured (autotune.study.store.recovery.end_failed), one of each.

The first named candidate is the first deployable launch and the steps start from its figure;
the others would only delay the steps that find the best. So with steps on, the others are
queued once a step has beaten the first, or no request-time step on its launch is left, and
before a launch step leaves that launch (candidates_now, later_candidates_due). The baseline,
the deploy target with its own defaults (autotune.space.engine_defaults), is queued like a
candidate: without steps behind the first; with them when the study leaves the incumbent's
launch anyway, or as the run's last trial (queue_baseline_when_due), so `best` states the gain
over what a user would run without autotune.
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.params import TrialConfig
from autotune.records.stored import TrialRecord
from autotune.space.engine_defaults import baseline_config, defaults_label
from autotune.space.sampling import fixed_params, reference_params
from autotune.study.plan import StudyPlan
from autotune.study.proposals.steering import Step
from autotune.study.results.counting import SURPLUS
from autotune.study.results.select import in_group_of
from autotune.study.store.recovery import end_failed, failure_of, owner

REFERENCE = "reference"
BASELINE = "baseline"
# What a trial ended "not run" had been queued as (its is_reference and candidate are cleared,
# so that no reader takes it for a reference or a candidate that failed).
QUEUED_AS = "queued_as"
# Failures that say nothing of the configuration: it was never measured to its end, and a
# named candidate that ended so is queued again by the next run.
NOT_MEASURED = frozenset({"interrupted", "orphaned", "lost", "no-reference", SURPLUS})
_HELD = (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED)


def queue_key(trial: FrozenTrial) -> str | None:
    """'reference', 'candidate:<name>', 'baseline', or None for a trial the sampler
    proposes."""
    record = TrialRecord.of(trial)
    if record.is_reference:
        return REFERENCE
    if record.baseline:
        return BASELINE
    return f"candidate:{record.candidate}" if record.candidate else None


def _holds(study: optuna.Study, trial: FrozenTrial) -> bool:
    """Whether `trial` stands for its reference or candidate: queued, running or measured. A
    failed reference is measured again; a candidate only when it failed without being
    measured (interrupted, its process gone)."""
    if trial.state in _HELD:
        return trial.state != TrialState.PRUNED or queue_key(trial) != REFERENCE
    if trial.state != TrialState.FAIL or queue_key(trial) == REFERENCE:
        return False
    kind = failure_of(study, trial).failure_kind
    return kind not in NOT_MEASURED


def _retire(study: optuna.Study, trial: FrozenTrial, reason: str) -> bool:
    """End the waiting `trial` "not run" with `reason`; False when another process started it
    first (it runs there)."""
    attrs = TrialRecord.part(
        owner=owner(),  # a run killed right here leaves an orphan the next run fails
        **{QUEUED_AS: queue_key(trial)},
        is_reference=None,
        candidate=None,
        baseline=None,
        failure_kind=SURPLUS,
        failure_reason=reason,
    )
    return end_failed(study, trial, attrs, claim=True)


def _reference_first(study: optuna.Study, plan: StudyPlan) -> list[str]:
    """Queue the reference unless it is measured, running or queued, and end the waiting
    trials queued before it "not run" (the caller queues the candidates again behind it).
    Only this run's comparison group counts: a machine of its own measures its own
    reference (autotune.study.results.select.reference_trial)."""
    trials = [t for t in study.get_trials(deepcopy=False) if in_group_of(t, plan.group)]
    if any(
        queue_key(t) == REFERENCE and t.state in (TrialState.COMPLETE, TrialState.RUNNING)
        for t in trials
    ):
        return []  # measured, or measured now by another process: the others wait for it
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    queued = next((t for t in waiting if queue_key(t) == REFERENCE), None)
    ahead = [t for t in waiting if queued is None or t.number < queued.number]
    reason = (
        "queued before the reference, which every trial is judged against: queued again behind it"
    )
    notes = [f"trial {t.number} not run: {reason}" for t in ahead if _retire(study, t, reason)]
    if queued is None:
        study.enqueue_trial(
            reference_params(plan.space), user_attrs=TrialRecord.part(is_reference=True).written()
        )
    return notes


def _retire_copies(study: optuna.Study, group: str | None) -> list[str]:
    """End "not run" each waiting trial whose reference or candidate an earlier trial of
    comparison group `group` holds (another process queued it at the same moment as this
    one); another machine's reference is not this group's."""
    first: dict[str, int] = {}
    notes = []
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        key = queue_key(trial)
        if key is None or not in_group_of(trial, group) or not _holds(study, trial):
            continue
        if key not in first:
            first[key] = trial.number
        elif trial.state == TrialState.WAITING:
            reason = f"queued twice, by two runs at the same time: trial {first[key]} is it"
            if _retire(study, trial, reason):
                notes.append(f"trial {trial.number} not run: {reason}")
    return notes


def queue_reference_and_candidates(
    study: optuna.Study, plan: StudyPlan, room: int, *, candidates: int | None = None
) -> list[str]:
    """The reference first (unless measured, running or queued), then as many named
    candidates not held yet as the run has `room` for (its trials left): each waiting trial
    is a database row, and an --enqueue file of 20,000 of them took minutes to queue for a
    run of one trial. What is not queued waits for a later run. `candidates`: at most this
    many now (the others wait for the steps: later_candidates_due). The lines to show."""
    notes = _reference_first(study, plan)
    trials = study.get_trials(deepcopy=False)
    room -= sum(1 for t in trials if t.state == TrialState.WAITING)
    # A candidate that failed by itself is not retried; the sampler goes on.
    held = {key for t in trials if (key := queue_key(t)) and _holds(study, t)}
    space = plan.space
    left = [c for c in space.candidates if f"candidate:{c.name}" not in held]
    left = left if candidates is None else left[:candidates]
    names: list[str | None] = [c.name for c in left]
    # With the steps on, the baseline has its own moment (queue_baseline_when_due).
    if candidates is None and not space.sampler.steps and BASELINE not in held:
        # Behind the first candidate, ahead of the later ones (None: the baseline).
        first_held = any(f"candidate:{c.name}" in held for c in space.candidates)
        if baseline_config(space) is not None:
            names.insert(0 if first_held else min(1, len(names)), None)
    for name in names[: max(0, room)]:
        if name is None:
            _queue_baseline(study, plan)
        else:
            study.enqueue_trial(
                fixed_params(space, space.candidate_config(name)),
                user_attrs=TrialRecord.part(candidate=name).written(),
            )
    notes += _retire_copies(study, plan.group)
    waiting = sum(1 for name in names[max(0, room) :] if name is not None)
    if waiting > 0:
        notes.append(
            f"{waiting} of {len(space.candidates)} named candidates not queued: this run has "
            "no trials left for them; a later run with more --trials measures them"
        )
    return notes


def _queue_baseline(study: optuna.Study, plan: StudyPlan) -> None:
    """Queue the deploy target's defaults under their label (autotune.space.engine_defaults)."""
    # No fixed parameters: its trial asks the sampler for none (autotune.study.run.objective).
    if baseline_config(plan.space) is not None:
        labelled = TrialRecord.part(baseline=defaults_label(plan.space.deploy))
        study.enqueue_trial({}, user_attrs=labelled.written())


def queue_baseline_when_due(
    study: optuna.Study, plan: StudyPlan, step: Step | None, *, last: bool
) -> None:
    """With the steps on, the deploy target's defaults once the first candidate has a figure
    and the next proposal (`step`, the scheduler's) leaves the running launch anyway, so their
    launch costs one start-up and no relaunch of the incumbent's; or as the run's last trial
    (`last`: its trials or its budget hold one more), so a short run still states the gain
    over them."""
    if not plan.space.sampler.steps or baseline_config(plan.space) is None:
        return
    trials = study.get_trials(deepcopy=False)
    leaving = step is None or step.new_launch
    first = any(TrialRecord.of(t).candidate and t.state.is_finished() for t in trials)
    if not last and not (leaving and first):
        return
    if not any(queue_key(t) == BASELINE and _holds(study, t) for t in trials):
        _queue_baseline(study, plan)


def next_queued_launch(study: optuna.Study, plan: StudyPlan) -> TrialConfig | None:
    """The configuration of the trial Optuna hands out next when it is a named candidate
    (the oldest waiting trial); None when that is the sampler's to propose, or nothing."""
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    if not waiting:
        return None
    record = TrialRecord.of(min(waiting, key=lambda t: t.number))
    if record.baseline:
        return baseline_config(plan.space)
    name = record.candidate
    if not name or plan.space.find_candidate(str(name)) is None:
        return None
    return plan.space.candidate_config(str(name))


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
