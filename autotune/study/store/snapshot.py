"""A study as a reading command sees it: read once, the same from start to end.

`best`, `export`, `report` and `verify` read a study's trials and attributes dozens of times
(the recommendation, each trial's reproduction check, every table); Optuna goes back to the
database each time, for the attributes and for any trial not finished when last read. A
snapshot reads each once, validated once by the storage's reading layer, so a command works on
one consistent state of a study that other processes may be writing, and a `best` over a
database takes a third of the time.

A view of a study is a storage view (StorageView): every reader of an optuna.Study (its
trials, get_trials, the samplers) asks its storage, so a view replaces the storage's public
reads it changes and passes the rest on, as Optuna's own cache wraps its backend.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Container
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StudyError
from autotune.records.checks import second_references
from autotune.records.readable import stand_in, study_problem
from autotune.study.store.database import kept
from autotune.study.store.optuna_private import study_id_of, trial_id


class StorageView(BaseStorage):
    """`inner` with every method of Optuna's storage interface passed on to it (the module's
    rule); a subclass replaces the reads its view changes."""

    def __init__(self, inner: BaseStorage) -> None:
        self.inner = inner


def _passed_on(name: str) -> Callable[..., Any]:
    def method(self: StorageView, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


# The interface's abstract methods, and the reads Optuna's Study makes outside them (its best
# trial) or at the end of a session.
for _name in (*BaseStorage.__abstractmethods__, "get_best_trial", "remove_session"):
    setattr(StorageView, _name, _passed_on(_name))
abc.update_abstractmethods(StorageView)


class SnapshotStorage(StorageView):
    """`inner` whose trials and study attributes are read once per study."""

    def __init__(self, inner: BaseStorage) -> None:
        super().__init__(inner)
        self.trials: dict[int, list[FrozenTrial]] = {}
        self.attrs: dict[int, dict[str, Any]] = {}

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        if study_id not in self.trials:
            stored = self.inner.get_all_trials(study_id, deepcopy=False)
            self.trials[study_id] = without_second_references(stored)
        return kept(self.trials[study_id], states, deepcopy)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        if study_id not in self.attrs:
            self.attrs[study_id] = self.inner.get_study_user_attrs(study_id)
        return dict(self.attrs[study_id])


class StudySnapshot(optuna.Study):
    """An optuna.Study read through a SnapshotStorage, whose user attributes are handed out
    as read (a shallow copy): Optuna's deep copy of them would recurse into an attribute
    nested too deep before the record's reader could refuse it by name."""

    def __init__(self, study_name: str, storage: SnapshotStorage) -> None:
        super().__init__(study_name=study_name, storage=storage)
        self.snapshot = storage

    @property
    def user_attrs(self) -> dict[str, Any]:
        return self.snapshot.get_study_user_attrs(study_id_of(self))


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
    study = StudySnapshot(study_name, SnapshotStorage(storage))
    problem = study_problem(study)
    if problem is not None:
        raise StudyError(f"study '{study_name}' cannot be read: {problem} (edited or damaged)")
    return study
