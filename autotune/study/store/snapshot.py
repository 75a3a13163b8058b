"""A study as a reading command sees it: read once, the same from start to end.

`best`, `export`, `report` and `verify` read a study's trials and attributes dozens of times
(the recommendation, each trial's reproduction check, every table); Optuna goes back to the
database each time, for the attributes and for any trial not finished when last read. A
snapshot reads each once, validated once by the storage's reading layer, so a command works on
one consistent state of a study that other processes may be writing, and a `best` over a
database takes a third of the time.
"""

from __future__ import annotations

import copy
from collections.abc import Container
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StudyError
from autotune.records.checks import second_references
from autotune.records.readable import stand_in, study_problem
from autotune.study.store.optuna_private import StudyView, storage_of, study_id_of, trial_id


class StudySnapshot(StudyView):
    """An Optuna study whose trials and user attributes are read from the storage once."""

    _read_once: list[FrozenTrial] | None = None
    _attrs_once: dict[str, Any] | None = None

    def read_trials(
        self, *, deepcopy: bool, states: Container[TrialState] | None, use_cache: bool
    ) -> list[FrozenTrial]:
        if self._read_once is None:
            stored = storage_of(self).get_all_trials(study_id_of(self), deepcopy=False)
            self._read_once = without_second_references(stored)
        trials = [t for t in self._read_once if states is None or t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    @property
    def user_attrs(self) -> dict[str, Any]:
        if self._attrs_once is None:
            self._attrs_once = storage_of(self).get_study_user_attrs(study_id_of(self))
        return dict(self._attrs_once)


def without_second_references(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """`trials` with every completed trial that claims the reference after the first one did
    as a stand-in named impossible (autotune.records.checks)."""
    second = second_references(trials)
    return [
        t
        if t.number not in second
        else stand_in(
            number=t.number,
            trial_id=trial_id(t),
            state=t.state,
            why=second[t.number],
            started=t.datetime_start,
            completed=t.datetime_complete,
            params=t.params,
            distributions=t.distributions,
            impossible=True,
        )
        for t in trials
    ]


def read_study(storage: optuna.storages.BaseStorage, study_name: str) -> optuna.Study:
    """The study as a reading command sees it, refused in one line when it cannot be ranked
    at all (autotune.records.readable.study_problem)."""
    study = StudySnapshot(study_name=study_name, storage=storage)
    problem = study_problem(study)
    if problem is not None:
        raise StudyError(f"study '{study_name}' cannot be read: {problem} (edited or damaged)")
    return study
