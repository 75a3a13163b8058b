"""Optuna's surface that autotune's storages use, pinned to the installed Optuna: a renamed,
removed or new storage method, or a private name autotune.study.store.optuna_private reaches,
fails here, not in a user's study.

The database storage (autotune.study.store.retrying) wraps what optuna.storages.get_storage
makes of an RDB storage by delegation, replacing no method of Optuna's; the journal storage
wraps its public writes. The private names left are each reached in optuna_private alone
(tests/architecture/test_optuna_private_names.py) and each is exercised here on a real
storage, so a hook Optuna stopped calling fails too."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.study.store import optuna_private, retrying, storage
from autotune.study.store.optuna_private import (
    BaseHeartbeat,
    HeartbeatStorage,
    ReplayCheckedJournalStorage,
    RowReadingRDBStorage,
    StudyView,
)

# Public writes autotune never makes: a study is never deleted by autotune.
NOT_WRITTEN_BY_AUTOTUNE = {"delete_study"}
WRITE_PREFIXES = ("create_", "set_", "delete_")
# Derived in BaseStorage from the delegated reads (get_all_trials, get_trial), so a lock wait
# they meet is already retried; and BaseStorage's own check of a trial's state.
DERIVED = {"get_n_trials", "get_trial_number_from_id", "get_trial_params"}
CHECKS = {"check_trial_is_updatable", "get_failed_trial_callback"}


def _public_methods(cls: type) -> set[str]:
    return {
        name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")
    }


def test_every_public_write_of_optunas_storage_is_wrapped_or_named_unused() -> None:
    writes = {
        name
        for name in _public_methods(optuna.storages.BaseStorage)
        if name.startswith(WRITE_PREFIXES)
    }
    assert writes, "no write methods found: the storage interface changed shape"
    uncovered = writes - set(retrying.WRITES) - NOT_WRITTEN_BY_AUTOTUNE
    assert not uncovered, f"new Optuna storage writes, wrap them: {sorted(uncovered)}"
    # And nothing wrapped that the interface no longer has.
    assert set(retrying.WRITES) <= writes


def test_every_public_read_of_optunas_storage_is_wrapped_or_derived() -> None:
    reads = {n for n in _public_methods(optuna.storages.BaseStorage) if n.startswith("get_")}
    cached = optuna.storages._CachedStorage
    assert not DERIVED & set(vars(cached)), "Optuna's cache now reads them itself: delegate them"
    uncovered = reads - set(retrying.READS) - DERIVED
    assert not uncovered, f"new Optuna storage reads, wrap them: {sorted(uncovered)}"


def test_the_database_storage_delegates_every_method_and_replaces_none_of_optunas() -> None:
    interface = _public_methods(optuna.storages.BaseStorage) | _public_methods(BaseHeartbeat)
    own = set(vars(retrying.RetryingStorage))
    missing = interface - own - DERIVED - CHECKS
    assert not missing, f"inherited, not delegated: {sorted(missing)}"
    assert not retrying.RetryingStorage.__abstractmethods__
    # Its only private method is the heartbeat hook it inherits from optuna_private.
    private = {n for n in own if n.startswith("_") and not n.startswith("__")} - {"_abc_impl"}
    assert not private, private
    wrapped = [*retrying.WRITES, *retrying.READS, "record_heartbeat", "stale_trials"]
    unwrapped = [
        n for n in wrapped if not hasattr(getattr(retrying.RetryingStorage, n), "__wrapped__")
    ]
    assert not unwrapped, unwrapped


def test_every_journal_write_exists_and_is_wrapped() -> None:
    journal = optuna.storages.JournalStorage
    assert not [n for n in retrying.WRITES if not callable(getattr(journal, n, None))]
    assert not [n for n in retrying.WRITES if n not in vars(storage.GuardedJournalStorage)]


def test_a_database_study_is_read_and_written_through_the_hooks(tmp_path: Path) -> None:
    """Each private name optuna_private reaches on a database storage, on a real one."""
    built: list[int] = []

    class Counting(RowReadingRDBStorage):
        def build_trial(self, build, model):  # type: ignore[no-untyped-def]
            built.append(model.number)
            return build(model)

    url = f"sqlite:///{tmp_path / 's.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        backend = Counting(url, heartbeat_interval=60, grace_period=120)
    wrapped = retrying.RetryingStorage(backend)
    assert optuna.storages.get_storage(wrapped) is wrapped  # Optuna wraps it no further
    study = optuna.create_study(study_name="s", storage=wrapped)
    study.enqueue_trial({"x": 1.0})
    assert optuna_private.storage_of(study) is wrapped
    assert optuna_private.study_id_of(study) == wrapped.get_study_id_from_name("s")
    trial = study.trials[0]
    assert wrapped.get_trial(optuna_private.trial_id(trial)).number == 0
    assert built, "Optuna read the trial without RowReadingRDBStorage.build_trial"
    # Optuna's heartbeat check reaches the storage through HeartbeatStorage.stale_trials.
    asked: list[int] = []

    class Watched(retrying.RetryingStorage):
        def stale_trials(self, study_id: int) -> list[int]:
            asked.append(study_id)
            return super().stale_trials(study_id)

    watched = Watched(backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(optuna.load_study(study_name="s", storage=watched))
    assert asked == [optuna_private.study_id_of(study)]
    assert optuna_private.stale_trial_ids(wrapped.inner, asked[0]) == []
    assert issubclass(retrying.RetryingStorage, HeartbeatStorage)
    with optuna_private.rdb_session(backend.scoped_session) as session:
        assert session.query(optuna_private.rdb_models.TrialModel).count() == 1


def test_a_journal_is_replayed_and_read_through_the_hooks(tmp_path: Path) -> None:
    path = tmp_path / "s.journal"
    backend = optuna.storages.journal.JournalFileBackend(str(path))
    checked: list[str] = []

    class Checked(ReplayCheckedJournalStorage):
        def checked(self, replay, file):  # type: ignore[no-untyped-def]
            checked.append(file)
            return replay

    journal = Checked(backend)
    assert checked == [str(path)], "the journal's replay no longer goes through `checked`"
    study = optuna.create_study(study_name="j", storage=journal)
    study.enqueue_trial({"x": 1.0})
    trial = study.trials[0]
    assert journal.study_of(trial).study_name == "j"
    assert optuna_private.journal_file(backend) == str(path)
    with optuna_private.journal_lock(backend):
        assert path.is_file()


def test_a_study_view_sees_every_read_of_its_trials(tmp_path: Path) -> None:
    class Empty(StudyView):
        def read_trials(self, *, deepcopy, states, use_cache):  # type: ignore[no-untyped-def]
            return []

    study = optuna.create_study(study_name="v")
    study.enqueue_trial({"x": 1.0})
    view = Empty(study_name="v", storage=optuna_private.storage_of(study))
    assert len(study.trials) == 1
    assert view.trials == []
    assert view.get_trials(states=(TrialState.WAITING,)) == []
