"""How a study's trials ended, counted one way for --trials, the progress lines, `best` and the
report.

A study holds more Optuna trials than it measured: a proposal of a configuration already
measured is recorded as a repeat (its twin's figures copied, nothing re-run), a trial can fail
(out of memory, a crash, a timeout, Ctrl-C), screening or racing can stop one early, and a
worker can step back when others reached the target. Only measured, screened and raced trials
count towards --trials; every reader names the others as what they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.records.repeats import is_repeat
from autotune.records.stored import TrialRecord
from autotune.study.results.select import is_feasible
from autotune.study.store.storage import failure_of

# The failure_kind of a trial another worker made unnecessary (autotune.study.run.objective).
SURPLUS = "surplus"
# A failure kind in words, where its short name would not say it.
FAILURE_WORDS = {"oom": "out of memory", "interrupted": "interrupted (Ctrl-C)"}


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


@dataclass(frozen=True)
class Failure:
    trial: int
    kind: str
    reason: str

    @property
    def kind_words(self) -> str:
        return FAILURE_WORDS.get(self.kind, self.kind)


@dataclass(frozen=True)
class TrialCounts:
    """Every trial of a study in exactly one group."""

    measured: int = 0  # completed and measured here, feasible or not
    infeasible: int = 0  # of the measured: outside a constraint
    screened: int = 0  # pruned by screening before its load test
    raced: int = 0  # stopped by racing: its load test showed it could not win
    repeats: int = 0  # proposals of a measured configuration: figures reused, nothing re-run
    failures: tuple[Failure, ...] = ()
    not_run: int = 0  # stepped back: other workers had reached the target
    unfinished: int = 0  # running or waiting

    @property
    def counted(self) -> int:
        """The trials --trials asks for (the k of the progress lines' [k/N])."""
        return self.measured + self.screened + self.raced

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def total(self) -> int:
        return self.counted + self.repeats + self.failed + self.not_run + self.unfinished

    def to_dict(self) -> dict[str, object]:
        return {
            "total": self.total,
            "counted": self.counted,
            "measured": self.measured,
            "infeasible": self.infeasible,
            "screened": self.screened,
            "raced": self.raced,
            "repeats": self.repeats,
            "failed": self.failed,
            "failures": [
                {"trial": f.trial, "kind": f.kind, "reason": f.reason} for f in self.failures
            ],
            "not_run": self.not_run,
            "unfinished": self.unfinished,
        }

    def line(self) -> str:
        """'7 trials: 6 counted towards --trials (6 measured, 4 of them infeasible), 1 repeat
        ...': the same words wherever a study's trials are counted."""
        inner = [f"{self.measured} measured"]
        if self.infeasible:
            inner[0] += f", {self.infeasible} of them infeasible"
        if self.screened:
            inner.append(f"{self.screened} screened out")
        if self.raced:
            inner.append(f"{self.raced} stopped by racing")
        parts = [f"{self.counted} counted towards --trials ({'; '.join(inner)})"]
        if self.repeats:
            parts.append(
                f"{_plural(self.repeats, 'repeated proposal')} of a measured configuration "
                "(figures reused, not re-run, not counted)"
            )
        if self.failures:
            kinds: dict[str, list[int]] = {}
            for failure in self.failures:
                kinds.setdefault(failure.kind_words, []).append(failure.trial)
            which = "; ".join(
                f"{kind}: {_plural(len(numbers), 'trial', number=False)} "
                + ", ".join(str(n) for n in numbers)
                for kind, numbers in kinds.items()
            )
            parts.append(f"{self.failed} failed ({which}; not counted)")
        if self.not_run:
            parts.append(f"{self.not_run} not run (target reached by other workers, or requeued)")
        if self.unfinished:
            parts.append(f"{self.unfinished} running or waiting")
        return f"{_plural(self.total, 'trial')}: " + ", ".join(parts)


def _plural(count: int, noun: str, *, number: bool = True) -> str:
    word = noun if count == 1 else f"{noun}s"
    return f"{count} {word}" if number else word


def trial_counts(study: optuna.Study, trials: list[FrozenTrial] | None = None) -> TrialCounts:
    """Count `trials` (default: all of the study's) into their groups."""
    groups = dict.fromkeys(("measured", "infeasible", "screened", "raced", "repeats", "not_run"), 0)
    unfinished = 0
    failures: list[Failure] = []
    every = study.get_trials(deepcopy=False)
    by_number = {t.number: t for t in every}
    for trial in every if trials is None else trials:
        record = TrialRecord.of(trial)
        if not trial.state.is_finished():
            unfinished += 1
        elif is_repeat(trial, by_number):
            groups["repeats"] += 1
        elif record.failure_kind == SURPLUS:
            groups["not_run"] += 1
        elif record.failure_kind is not None or trial.state == TrialState.FAIL:
            failed = failure_of(study, trial)
            failures.append(
                Failure(
                    trial.number,
                    failed.failure_kind or "error",
                    failed.failure_reason or "no reason recorded",
                )
            )
        elif trial.state == TrialState.PRUNED:
            groups["raced" if record.raced_by is not None else "screened"] += 1
        else:
            groups["measured"] += 1
            groups["infeasible"] += not is_feasible(trial)
    return TrialCounts(**groups, failures=tuple(failures), unfinished=unfinished)
