"""The best confirmed trial: the one a trial the search floor passed must beat on the first
objective for its confirmation to matter (autotune.accuracy.confirm).

The study recommends the fastest confirmed trial, else the reference, so a trial no faster
than one already confirmed (or than the reference, where it can be recommended: it
reproduces on the deploy target) can never be recommended; its held-out answers would
change nothing. Only which confirmations run depends on this (and so on held-out outcomes),
never the search: each one's level is fixed by the search floor's verdicts alone
(autotune.study.run.verdicts.confirmation_request). A trial counts where it could be
recommended (deployable, inside the memory budget and the latency SLO) and its confirmation
confirmed it; with dummy weights, where it timed its confirmation (autotune.accuracy.timed:
the candidate it models passes).
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.accuracy.timed import TIMED_ITEMS
from autotune.records.parts import NotConfirmed
from autotune.records.stored import TrialRecord
from autotune.study.results.select import confirmation_of, in_group_of

_LIMITS = ("memory", "latency", "deployable")


@dataclass(frozen=True)
class BestConfirmed:
    """The best confirmed trial, its first objective and whether it is the reference."""

    number: int
    value: float
    is_reference: bool
    maximize: bool

    def beaten_by(self, value: float) -> bool:
        """Whether `value` of the first objective is strictly better than this trial's."""
        return value > self.value if self.maximize else value < self.value

    def not_confirmed(self) -> NotConfirmed:
        """Why a trial no faster than this one is not confirmed, as it records it."""
        if self.is_reference:
            words = f"slower than the reference (trial #{self.number}), which may be recommended"
        else:
            words = f"slower than trial #{self.number}, already confirmed"
        return NotConfirmed(confirmed_trial=self.number, words=words)


def counts_as_confirmed(trial: FrozenTrial) -> bool:
    """Whether a completed trial may be recommended: the reference where it is deployable,
    else a trial confirmed on the held-out items (or that timed its confirmation) inside
    every limit."""
    if trial.state != TrialState.COMPLETE or not trial.values:
        return False
    record = TrialRecord.of(trial)
    if record.is_reference:
        return bool(record.deployable)
    if record.accuracy_not_judged is not None or record.confirmation_skipped is not None:
        return False
    constraints = record.constraints or {}
    if record.deployable is False or any(constraints.get(n, 0.0) > 0 for n in _LIMITS):
        return False
    verdict = confirmation_of(trial)
    if verdict is not None:
        return verdict.decision == "confirmed"
    return record.figure(TIMED_ITEMS) is not None


def best_confirmed(study: optuna.Study, group: str | None = None) -> BestConfirmed | None:
    """The best among the completed trials of comparison group `group` (None: any) that count
    as confirmed; None before the first (every trial the floor passes is then confirmed). The
    recommendation is per group (autotune.study.results.groups): a study resumed on another
    machine compares its trials with their own machine's, never with another's speed."""
    maximize = study.directions[0] == optuna.study.StudyDirection.MAXIMIZE
    best: BestConfirmed | None = None
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if not in_group_of(trial, group) or not counts_as_confirmed(trial):
            continue
        value = float(trial.values[0])
        if best is None or best.beaten_by(value):
            held = TrialRecord.of(trial).is_reference
            best = BestConfirmed(trial.number, value, held, maximize)
    return best
