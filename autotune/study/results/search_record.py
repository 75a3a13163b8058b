"""The search record: the trial a new one must beat on the first objective for its accuracy to
matter (autotune.accuracy.confirm).

The study recommends the fastest confirmed trial, else the reference, so a trial no faster
than the reference or than an earlier trial the search floor passed can never be recommended
while that one stands. The record is read from search-side facts alone: the search floor's
verdicts, the speeds, memory, latency and deployability, never a confirmation's outcome (a
failed confirmation leaves the record where it was), so which trials are confirmed, and in
what order, stays fixed by the search. The reference counts only where it can be recommended
(it reproduces on the deploy target); a trial counts where it could be (deployable, inside
the memory budget and the latency SLO) and the floor passed it; with dummy weights, where it
answered its timed pass (autotune.accuracy.timed: the candidate it models passes).
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.accuracy.timed import TIMED_ITEMS
from autotune.records.stored import TrialRecord

# The search floor's decisions that pass a trial: its sequence, or answers word for word the
# reference's (autotune.study.run.verdicts.IDENTICAL).
PASSED = ("feasible", "identical answers")
_LIMITS = ("memory", "latency", "deployable")


@dataclass(frozen=True)
class SearchRecord:
    """The record: its trial, that trial's first objective and whether it is the reference."""

    number: int
    value: float
    is_reference: bool
    maximize: bool

    def beaten_by(self, value: float) -> bool:
        """Whether `value` of the first objective is strictly better than the record's."""
        return value > self.value if self.maximize else value < self.value

    def words(self) -> str:
        """'slower than trial #3 the floor passed', or than the reference."""
        if self.is_reference:
            return f"slower than the reference (trial #{self.number})"
        return f"slower than trial #{self.number} the floor passed"


def sets_records(trial: FrozenTrial) -> bool:
    """Whether a completed trial may hold the record: the reference where it is deployable,
    else a trial the search floor passed (or that timed its pass) inside every limit."""
    if trial.state != TrialState.COMPLETE or not trial.values:
        return False
    record = TrialRecord.of(trial)
    if record.is_reference:
        return bool(record.deployable)
    if record.accuracy_not_judged is not None or record.deployable is False:
        return False
    constraints = record.constraints or {}
    if any(constraints.get(name, 0.0) > 0 for name in _LIMITS):
        return False
    paired = record.paired_vs_reference
    if paired is not None:
        return paired.decision in PASSED
    return record.figure(TIMED_ITEMS) is not None


def search_record(study: optuna.Study) -> SearchRecord | None:
    """The record among the study's completed trials; None before the first that may hold
    it (every trial is then judged)."""
    maximize = study.directions[0] == optuna.study.StudyDirection.MAXIMIZE
    best: SearchRecord | None = None
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if not sets_records(trial):
            continue
        value = float(trial.values[0])
        if best is None or best.beaten_by(value):
            held = TrialRecord.of(trial).is_reference
            best = SearchRecord(trial.number, value, held, maximize)
    return best
