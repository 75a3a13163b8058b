"""Which trials count towards --trials, shared by every worker of a study."""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.records.stored import TrialRecord


def counts_towards_target(trial: FrozenTrial) -> bool:
    """Whether a trial is one --trials asks for: not a repeated proposal, not a failed,
    interrupted or out-of-memory trial (whatever its state)."""
    record = TrialRecord.of(trial)
    return record.duplicate_of is None and record.failure_kind is None


def counted_trials(study: optuna.Study, *, include_running: bool = False) -> int:
    """Measured trials, the ones --trials asks for: not a repeated proposal, not a failed,
    interrupted or out-of-memory trial. With `include_running`, trials other processes are
    still running count too, so processes that share a study stop together at the target
    instead of overshooting it."""
    states = {TrialState.COMPLETE, TrialState.PRUNED}
    if include_running:
        states.add(TrialState.RUNNING)
    return sum(
        1
        for t in study.get_trials(deepcopy=False)
        if t.state in states and counts_towards_target(t)
    )


def is_surplus(study: optuna.Study, number: int, target: int) -> bool:
    """Whether trial `number` is beyond the target: the trials before it, finished and counted
    or still running in other workers, reach it already. Workers that ask for a trial at the
    same moment would overshoot the target; the later trial number steps back."""
    earlier = sum(
        1
        for t in study.get_trials(deepcopy=False)
        if t.number < number
        and t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
        and counts_towards_target(t)
    )
    return earlier >= target
