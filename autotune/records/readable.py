"""Which stored trials can be read, and what the readers see of one that cannot.

A finished trial is read in full: its objective values (one finite number per objective for a
completed trial), its record (autotune.records.stored.TrialRecord, its configuration
included, which a completed trial must have). One that fails, edited by hand or damaged, is
shown to every reader as a stand-in: a failed trial whose failure_reason names the field, so
`best` and `report` leave it out of the ranking and name it, the sampler skips it, and the
rest of the study stays readable. A record that reads but cannot be true (figures out of
range, a failure on a completed trial, values that disagree with its figures:
autotune.records.checks) is a stand-in too, named impossible. The storage classes
(autotune.study.store.storage) put the stand-ins in place; nothing is written back.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.records.checks import trial_problem
from autotune.records.stored import StudyRecord, TrialRecord

# The failure_kind of a stand-in; `stored_state` keeps the state the storage holds.
UNREADABLE = "unreadable"
STORED_STATE = "stored_state"
UNREAD = "cannot be read"
IMPOSSIBLE = "is impossible"


def study_problem(study: optuna.Study) -> str | None:
    """Why a study cannot be ranked at all ('field: what is wrong'), or None: every objective
    has a direction, and the record names as many objectives as there are."""
    directions = study.directions
    unset = [i for i, d in enumerate(directions) if d == optuna.study.StudyDirection.NOT_SET]
    if not directions or unset:
        return f"directions: objective {unset[0] if unset else 0} has none"
    named = StudyRecord.of(study).objective_metrics
    if named and len(named) != len(directions):
        return f"objective_metrics: {len(named)} named for {len(directions)} direction(s)"
    return None


def unreadable_because(trial: FrozenTrial, objectives: int) -> str | None:
    """Why a finished trial cannot be read ('field: what is wrong'), or None."""
    if trial.state == TrialState.COMPLETE:
        problem = _values_problem(trial.values, objectives)
        if problem is not None:
            return problem
        if not trial.user_attrs.get("config"):
            return "config: missing (the trial's configuration was not stored)"
    return TrialRecord.problem(trial.user_attrs)


def _values_problem(values: list[float] | None, objectives: int) -> str | None:
    if not values:
        return "values: none stored for a completed trial"
    if len(values) != objectives:
        return f"values: {len(values)} stored for {objectives} objective(s)"
    for index, value in enumerate(values):
        if type(value) not in (int, float) or not math.isfinite(value):
            return f"values: objective {index} is {value!r}, not a measurement"
    return None


def stand_in(
    *,
    number: int,
    trial_id: int,
    state: TrialState,
    why: str,
    started: datetime.datetime | None = None,
    completed: datetime.datetime | None = None,
    params: dict[str, Any] | None = None,
    distributions: dict[str, Any] | None = None,
    impossible: bool = False,
) -> FrozenTrial:
    """The failed trial readers see in place of an unreadable one (`impossible`: one that
    reads but cannot be true). Its parameters, where they could be read, stay: Optuna checks a
    new trial's against every stored one, and a run says so first (autotune.study.run.loop)."""
    return FrozenTrial(
        number=number,
        state=TrialState.FAIL,
        value=None,
        values=None,
        datetime_start=started,
        datetime_complete=completed,
        params=params or {},
        distributions=distributions or {},
        user_attrs={
            "failure_kind": UNREADABLE,
            "failure_reason": f"its stored record {IMPOSSIBLE if impossible else UNREAD}: {why}",
            STORED_STATE: state.name,
        },
        system_attrs={},
        intermediate_values={},
        trial_id=trial_id,
    )


def _shape_problem(trial: FrozenTrial) -> str | None:
    """What Optuna itself would build differently (a journal's replay keeps what a record
    says): attributes and parameters that are no mapping, values that are no list."""
    for name in ("user_attrs", "system_attrs", "params", "distributions"):
        if not isinstance(getattr(trial, name), dict):
            return f"{name}: not a mapping"
    if trial.values is not None and not isinstance(trial.values, list):
        return "values: not a list"
    return None


def readable(
    trial: FrozenTrial, objectives: int, metrics: Sequence[str] = (), *, trial_id: int
) -> FrozenTrial:
    """`trial` itself, or its stand-in when it cannot be read or cannot be true. A running or
    waiting trial is read as it is (its own process is still writing it) unless its very
    shape is broken. `metrics`: the study's objective metrics (autotune.records.checks);
    `trial_id`: the storage's id of `trial`, which its stand-in keeps."""
    if is_stand_in(trial):
        return trial
    shape = _shape_problem(trial)
    why = shape
    if why is None and trial.state.is_finished():
        why = unreadable_because(trial, objectives)
    impossible = None
    if why is None and trial.state.is_finished():
        impossible = why = trial_problem(trial, metrics)
    if why is None:
        return trial
    return stand_in(
        number=trial.number,
        trial_id=trial_id,
        state=trial.state,
        why=why,
        started=trial.datetime_start,
        completed=trial.datetime_complete,
        params=trial.params if shape is None else None,
        distributions=trial.distributions if shape is None else None,
        impossible=impossible is not None,
    )


class ReadableView:
    """readable() of each trial, worked out once per stored version of it: a storage that
    keeps its trials in memory (the journal's replay) makes a new FrozenTrial whenever one
    changes, and hands out the same object until then."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[FrozenTrial, FrozenTrial]] = {}

    def __call__(
        self, trial: FrozenTrial, objectives: int, metrics: Sequence[str] = (), *, trial_id: int
    ) -> FrozenTrial:
        seen = self._seen.get(trial_id)
        if seen is not None and seen[0] is trial:
            return seen[1]
        shown = readable(trial, objectives, metrics, trial_id=trial_id)
        self._seen[trial_id] = (trial, shown)
        return shown


def is_stand_in(trial: FrozenTrial) -> bool:
    attrs = trial.user_attrs
    return (
        isinstance(attrs, dict)
        and attrs.get("failure_kind") == UNREADABLE
        and STORED_STATE in attrs
    )


def unreadable_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The study's stand-ins, in trial order."""
    return [t for t in study.get_trials(deepcopy=False) if is_stand_in(t)]


def unreadable_reason(trial: FrozenTrial) -> str:
    """Why a stand-in's stored record cannot be read ('its stored record ...')."""
    return str(trial.user_attrs["failure_reason"])


def unreadable_line(study_name: str, trial: FrozenTrial) -> str:
    """'study S, trial N (its stored state) cannot be read: field: what is wrong', or
    "study S, trial N's record (its stored state) is impossible: what cannot be true"."""
    reason = unreadable_reason(trial).removeprefix("its stored record ")
    stored = str(trial.user_attrs[STORED_STATE]).lower()
    if reason.startswith(IMPOSSIBLE):
        return f"study '{study_name}', trial {trial.number}'s record ({stored}) {reason}"
    return f"study '{study_name}', trial {trial.number} ({stored}) {reason}"


def completed_unreadable(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Stand-ins of trials the storage holds as completed: any of them could have been the
    recommendation."""
    return [t for t in trials if is_stand_in(t) and t.user_attrs[STORED_STATE] == "COMPLETE"]
