"""Optuna's private names that autotune still needs, named here and in no other module.

Optuna has no public way to learn a trial's storage id, a study's storage, a journal file's
path and lock, the study a journal's trial belongs to, or to build one database trial from its
rows. Each is reached through one small accessor below, so an Optuna release that renames one
breaks this module alone: tests/study/store/test_storage_optuna_pins.py pins each name to the
installed Optuna, and tests/architecture/test_optuna_private_names.py keeps every other module
off them. No method of Optuna's, public or private, is overridden or replaced here: autotune's
storages wrap Optuna's by delegation, through its public storage interface.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, TypeVar

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.storages._rdb import models as rdb_models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import get_lock_file
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial

__all__ = [
    "build_trial",
    "heartbeat_storage",
    "journal_file",
    "journal_lock",
    "journal_study_of",
    "journal_worker_id",
    "rdb_models",
    "rdb_session",
    "storage_of",
    "study_id_of",
    "trial_id",
]

S = TypeVar("S", bound=type)


def trial_id(trial: FrozenTrial) -> int:
    """The storage's id of `trial` (its number counts within the study only)."""
    return int(trial._trial_id)


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage a study reads and writes (after optuna.storages.get_storage)."""
    return study._storage


def study_id_of(study: optuna.Study) -> int:
    """The storage's id of `study`."""
    return int(study._study_id)


def heartbeat_storage(cls: S) -> S:
    """`cls`, a storage that wraps a heartbeat storage by delegation, counted as one: Optuna
    runs a trial's heartbeat, and fails stale trials, only for a BaseHeartbeat. Registered
    rather than derived, so the wrapper defines none of the private methods BaseHeartbeat
    declares; Optuna's calls of them reach the wrapped storage (`cls.__getattr__`)."""
    BaseHeartbeat.register(cls)
    return cls


def build_trial(storage: RDBStorage, model: rdb_models.TrialModel) -> FrozenTrial:
    """Optuna's own reading of the trial stored in `model` (a row of `storage`)."""
    trial: FrozenTrial = storage._build_frozen_trial_from_trial_model(model)
    return trial


def journal_file(backend: JournalFileBackend) -> str:
    """The path of the file a journal backend appends to."""
    return str(backend._file_path)


def journal_lock(backend: JournalFileBackend) -> contextlib.AbstractContextManager[Any]:
    """The journal file's lock held for a block, as Optuna's own appends hold it."""
    return get_lock_file(backend._lock)


def journal_worker_id(storage: JournalStorage) -> str:
    """The id this thread's records carry in `storage`'s journal."""
    return str(storage._replay_result.worker_id)


def journal_study_of(storage: JournalStorage, trial: FrozenTrial) -> FrozenStudy:
    """The study `trial` belongs to, as the journal's replay holds it."""
    replay = storage._replay_result
    study: FrozenStudy = replay.get_study(replay._trial_id_to_study_id[trial._trial_id])
    return study


@contextlib.contextmanager
def rdb_session(scoped_session: Any) -> Iterator[Any]:
    """A session of an RDB storage's `scoped_session`, committed or rolled back as Optuna's
    own are."""
    with _create_scoped_session(scoped_session) as session:
        yield session
