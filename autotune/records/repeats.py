"""Repeated proposals, checked for what they claim.

A trial that repeats a measured configuration stores `duplicate_of`, the trial whose figures
it copied (autotune.study.run.twins), and readers leave it out of the ranking: the twin stands for
those figures. A stored attribute is data anyone who can write the study may have shaped: a
`duplicate_of` naming the trial itself, a missing or later trial, -1, a trial that did not
complete or one with another configuration would silently drop a measured trial, the
recommended one included. Such a claim is refused: the trial is ranked on its own figures (it
is no repeat), and `best` and `report` name it in one line.
"""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from autotune.records.stored import TrialRecord


def repeat_problem(trial: FrozenTrial, by_number: dict[int, FrozenTrial]) -> str | None:
    """Why the completed `trial`'s `duplicate_of` is not an earlier completed trial with its
    configuration (None when it is, or when it claims none). Only a completed trial's claim
    decides what is ranked."""
    if trial.state != TrialState.COMPLETE:
        return None
    record = TrialRecord.of(trial)
    twin_number = record.duplicate_of
    if twin_number is None:
        return None
    if twin_number == trial.number:
        return "it names the trial itself"
    if twin_number > trial.number or twin_number < 0:
        return f"trial {twin_number} is not an earlier trial"
    twin = by_number.get(twin_number)
    if twin is None:
        return f"the study has no trial {twin_number}"
    if twin.state != TrialState.COMPLETE:
        return f"trial {twin_number} is {twin.state.name}, not completed"
    if TrialRecord.of(twin).config != record.config:
        return f"trial {twin_number} measured another configuration"
    return None


def _by_number(trials: list[FrozenTrial]) -> dict[int, FrozenTrial]:
    return {t.number: t for t in trials}


def is_repeat(trial: FrozenTrial, by_number: dict[int, FrozenTrial]) -> bool:
    """Whether `trial` is a repeat whose figures its twin stands for: it claims one, and the
    claim holds (a trial that is not completed keeps its claim: it is never ranked)."""
    if TrialRecord.of(trial).duplicate_of is None:
        return False
    return repeat_problem(trial, by_number) is None


def measured(trials: list[FrozenTrial], every: list[FrozenTrial]) -> list[FrozenTrial]:
    """Of `trials`, those that stand for their own figures (not a repeat); `every`: the
    study's trials, where a twin is looked up."""
    by_number = _by_number(every)
    return [t for t in trials if not is_repeat(t, by_number)]


def repeats(trials: list[FrozenTrial], every: list[FrozenTrial]) -> list[FrozenTrial]:
    """Of `trials`, the repeats whose claim holds."""
    by_number = _by_number(every)
    return [t for t in trials if is_repeat(t, by_number)]


def impossible_repeats(trials: list[FrozenTrial]) -> list[str]:
    """One line for each completed trial whose `duplicate_of` does not hold."""
    by_number = _by_number(trials)
    lines = []
    for trial in trials:
        why = repeat_problem(trial, by_number)
        if why is not None:
            lines.append(
                f"trial {trial.number}: its stored duplicate_of "
                f"{TrialRecord.of(trial).duplicate_of} is impossible ({why}; a repeat names an "
                "earlier completed trial with its configuration): it is not taken as a repeat, "
                "and is ranked on its own figures"
            )
    return lines
