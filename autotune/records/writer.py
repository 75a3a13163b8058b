"""The one writer of what a study and its trials store (tests/architecture/test_architecture.py
keeps it so).

Every attribute goes through here, checked as part of its record (autotune.records.stored)
before Optuna takes it: a writer that would store `"batch_size": "x"` or a NaN accuracy fails
in its own trial, by field, instead of leaving a record that `best`, `report` and `verify` can no
longer read. A trial's ending (completed, screened out, raced, a repeat of its twin) is checked
whole, with what the trial already holds; a write along the way is checked on its own, so a
record already damaged never hides why a trial failed.

Writers hand over typed parts (`TrialRecord.part(...)`, `StudyRecord.part(...)`, with the
parts of autotune.records.parts), never mappings keyed by string: a field's name is spelt in
autotune.records alone (tests/architecture/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import optuna

from autotune.errors import StudyError
from autotune.records.checks import figure_problem
from autotune.records.stored import StudyRecord, TrialRecord


def _checked(record: type[TrialRecord | StudyRecord], attrs: Mapping[str, Any], what: str) -> None:
    problem = record.problem(dict(attrs))
    if problem is None and record is TrialRecord:
        problem = figure_problem(attrs)
    if problem is not None:
        raise StudyError(f"{what} would store an unreadable record: {problem}")


def write_trial(trial: optuna.Trial, part: TrialRecord) -> None:
    """Store `part` on a running trial, each field checked as a TrialRecord field."""
    attrs = part.written()
    _checked(TrialRecord, attrs, f"trial {trial.number}")
    for key, value in attrs.items():
        trial.set_user_attr(key, value)


def end_trial(
    trial: optuna.Trial, part: TrialRecord, *, keep: Callable[[], None] | None = None
) -> None:
    """Store a trial's ending: `part` with what the trial holds must read as one whole
    TrialRecord. `keep` runs once the record is known good, before the storage is written
    (the spool: autotune.study.store.recovery)."""
    attrs = part.written()
    _checked(TrialRecord, {**trial.user_attrs, **attrs}, f"trial {trial.number}")
    if keep is not None:
        keep()
    for key, value in attrs.items():
        trial.set_user_attr(key, value)


def write_finished_trial(
    storage: optuna.storages.BaseStorage, trial_id: int, number: int, part: TrialRecord
) -> None:
    """Store `part` on a trial this process does not run (failed by a later run, or queued
    by an earlier one), through its storage: Optuna's Trial is only the running one's.
    `trial_id`: the storage's id of trial `number`."""
    attrs = part.written()
    _checked(TrialRecord, attrs, f"trial {number}")
    for key, value in attrs.items():
        storage.set_trial_user_attr(trial_id, key, value)


def write_study(study: optuna.Study, part: StudyRecord) -> None:
    """Store `part` on the study, each field checked as a StudyRecord field."""
    attrs = part.written()
    _checked(StudyRecord, attrs, f"study {study.study_name!r}")
    for key, value in attrs.items():
        study.set_user_attr(key, value)
