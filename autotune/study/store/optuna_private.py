"""Optuna's private names that autotune still needs, named here and in no other module.

Optuna has no public way to learn a trial's storage id, a study's storage or a journal file's
path and lock, and where it lets a subclass step in, it is through private methods (the
heartbeat's stale-trial check, building a database trial, replaying a journal, a Study's read
of its trials). Each is reached through one small accessor or hook class below, whose hooks
have public names, so an Optuna release that renames one breaks this module alone:
tests/study/store/test_storage_optuna_pins.py pins each name to the installed Optuna, and
tests/architecture/test_optuna_private_names.py keeps every other module off them.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Container, Iterator
from typing import Any

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages._rdb import models as rdb_models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import get_lock_file
from optuna.storages.journal._storage import JournalStorageReplayResult
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial, TrialState

__all__ = [
    "BaseHeartbeat",
    "HeartbeatStorage",
    "JournalStorageReplayResult",
    "ReplayCheckedJournalStorage",
    "RowReadingRDBStorage",
    "StudyView",
    "journal_file",
    "journal_lock",
    "rdb_models",
    "rdb_session",
    "stale_trial_ids",
    "storage_of",
    "study_id_of",
    "trial_id",
]


def trial_id(trial: FrozenTrial) -> int:
    """The storage's id of `trial` (its number counts within the study only)."""
    return int(trial._trial_id)


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage a study reads and writes (after optuna.storages.get_storage)."""
    return study._storage


def study_id_of(study: optuna.Study) -> int:
    """The storage's id of `study`."""
    return int(study._study_id)


def stale_trial_ids(storage: BaseStorage, study_id: int) -> list[int]:
    """What `storage`'s heartbeat check finds stale in the study of `study_id`."""
    return list(storage._get_stale_trial_ids(study_id))  # type: ignore[attr-defined]


def journal_file(backend: JournalFileBackend) -> str:
    """The path of the file a journal backend appends to."""
    return str(backend._file_path)


def journal_lock(backend: JournalFileBackend) -> contextlib.AbstractContextManager[Any]:
    """The journal file's lock held for a block, as Optuna's own appends hold it."""
    return get_lock_file(backend._lock)


@contextlib.contextmanager
def rdb_session(scoped_session: Any) -> Iterator[Any]:
    """A session of an RDB storage's `scoped_session`, committed or rolled back as Optuna's
    own are."""
    with _create_scoped_session(scoped_session) as session:
        yield session


class HeartbeatStorage(BaseStorage, BaseHeartbeat):
    """A storage with a heartbeat whose stale-trial check is the public-named
    `stale_trials`: Optuna's fail_stale_trials calls a private name on the storage."""

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return self.stale_trials(study_id)

    @abc.abstractmethod
    def stale_trials(self, study_id: int) -> list[int]:
        """The ids of the study's running trials whose heartbeat stopped."""


class RowReadingRDBStorage(RDBStorage):
    """Optuna's RDB storage building each trial it reads through `build_trial`: Optuna builds
    a read's trials in one private method, where one bad row fails them all."""

    def _build_frozen_trial_from_trial_model(self, trial: Any) -> FrozenTrial:
        return self.build_trial(super()._build_frozen_trial_from_trial_model, trial)

    def build_trial(
        self, build: Callable[[rdb_models.TrialModel], FrozenTrial], model: rdb_models.TrialModel
    ) -> FrozenTrial:
        """The trial in `model`; `build` is Optuna's own reading of it."""
        return build(model)


class ReplayCheckedJournalStorage(JournalStorage):
    """Optuna's journal storage replaying its file through `checked`: the replay, and the sync
    that feeds it (also at construction), are private."""

    def _sync_with_backend(self) -> None:
        path = journal_file(self._backend)  # type: ignore[arg-type]
        self._replay_result = self.checked(self._replay_result, path)
        super()._sync_with_backend()

    def checked(self, replay: JournalStorageReplayResult, path: str) -> JournalStorageReplayResult:
        """The replay to apply the journal's lines with (`path`: the journal file)."""
        return replay

    def study_of(self, trial: FrozenTrial) -> FrozenStudy:
        """The study `trial` belongs to, as the replay holds it."""
        replay = self._replay_result
        study: FrozenStudy = replay.get_study(replay._trial_id_to_study_id[trial._trial_id])
        return study


class StudyView(optuna.Study):
    """An optuna.Study whose trials are read through `read_trials`: every reader of a Study
    (its trials, get_trials, the samplers) ends in one private method."""

    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        return self.read_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)

    def read_trials(
        self, *, deepcopy: bool, states: Container[TrialState] | None, use_cache: bool
    ) -> list[FrozenTrial]:
        """The study's trials, as Optuna reads them."""
        return super()._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
