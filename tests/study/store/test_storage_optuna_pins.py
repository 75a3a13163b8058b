"""Optuna's surface that autotune's storages use, pinned to the installed Optuna: a renamed,
removed or new storage method, or a private name autotune.study.store.optuna_private reaches,
fails here, not in a user's study.

The database storage (autotune.study.store.database) wraps what optuna.storages.get_storage
makes of an RDB storage by delegation, replacing no method of Optuna's; the journal storage
wraps its public methods. The private names left are each reached in optuna_private alone
(tests/architecture/test_optuna_private_names.py) and each is exercised here on a real
storage, so a name Optuna stopped calling or renamed fails too."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.study.store import database, optuna_private, storage
from autotune.study.store.journal import WholeRecordJournal
from autotune.study.store.snapshot import StorageView

# Public writes autotune never makes: a study is never deleted by autotune.
NOT_WRITTEN_BY_AUTOTUNE = {"delete_study"}
WRITE_PREFIXES = ("create_", "set_", "delete_")
# Derived in BaseStorage from the wrapped reads (get_all_trials, get_trial), so a lock wait
# they meet is already retried, and the trial they read is read row by row.
DERIVED = {
    "get_n_trials",
    "get_trial_number_from_id",
    "get_trial_params",
    "get_trial_param",
    "get_trial_user_attrs",
    "get_trial_system_attrs",
}
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
    uncovered = writes - set(database.WRITES) - NOT_WRITTEN_BY_AUTOTUNE
    assert not uncovered, f"new Optuna storage writes, wrap them: {sorted(uncovered)}"
    # And nothing wrapped that the interface no longer has.
    assert set(database.WRITES) <= writes


def test_every_public_read_of_optunas_storage_is_wrapped_or_derived() -> None:
    reads = {n for n in _public_methods(optuna.storages.BaseStorage) if n.startswith("get_")}
    uncovered = reads - set(database.READS) - DERIVED
    assert not uncovered, f"new Optuna storage reads, wrap them: {sorted(uncovered)}"


def test_the_database_storage_delegates_every_method_and_replaces_none_of_optunas() -> None:
    public = _public_methods(optuna.storages.BaseStorage) | {
        "record_heartbeat",
        "get_heartbeat_interval",
        "get_heartbeat_stale_trial_callback",
    }
    own = set(vars(database.RetryingStorage))
    missing = public - own - DERIVED - {"check_trial_is_updatable"}
    assert not missing, f"inherited, not delegated: {sorted(missing)}"
    assert not database.RetryingStorage.__abstractmethods__
    # No private method of its own: Optuna's private calls reach the wrapped storage.
    private = {n for n in own if n.startswith("_") and not n.startswith("__")} - {"_abc_impl"}
    assert not private, private
    wrapped = [*database.WRITES, *database.READS, "record_heartbeat"]
    unwrapped = [
        n for n in wrapped if not hasattr(getattr(database.RetryingStorage, n), "__wrapped__")
    ]
    assert not unwrapped, unwrapped


def test_every_journal_write_exists_and_is_wrapped() -> None:
    journal = optuna.storages.JournalStorage
    assert not [n for n in database.WRITES if not callable(getattr(journal, n, None))]
    assert not [n for n in database.WRITES if n not in vars(storage.GuardedJournalStorage)]


def test_a_database_study_is_read_and_written_through_the_wrapper(tmp_path: Path) -> None:
    """Each private name optuna_private reaches on a database storage, on a real one."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        backend = optuna.storages.RDBStorage(url, heartbeat_interval=60, grace_period=120)
    wrapped = database.RetryingStorage(backend)
    assert optuna.storages.get_storage(wrapped) is wrapped  # Optuna wraps it no further
    study = optuna.create_study(study_name="s", storage=wrapped)
    study.enqueue_trial({"x": 1.0})
    assert optuna_private.storage_of(study) is wrapped
    assert optuna_private.study_id_of(study) == wrapped.get_study_id_from_name("s")
    trial = study.trials[0]
    assert wrapped.get_trial(optuna_private.trial_id(trial)).number == 0
    with optuna_private.rdb_session(backend.scoped_session) as session:
        model = session.query(optuna_private.rdb_models.TrialModel).one()
        assert optuna_private.build_trial(backend, model).number == 0
    # Optuna's heartbeat runs, and checks for stale trials, through the wrapper.
    assert optuna.storages._heartbeat.is_heartbeat_enabled(wrapped)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a heartbeat outside optimize
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.ask()  # the enqueued trial, now RUNNING; its heartbeat never came
        optuna.storages.fail_stale_trials(study)
    assert study.trials[0].state == TrialState.RUNNING  # within its grace period


def test_a_journal_is_replayed_and_read_through_the_accessors(tmp_path: Path) -> None:
    path = tmp_path / "s.journal"
    backend = WholeRecordJournal(str(path))
    journal = storage.GuardedJournalStorage(backend)
    study = optuna.create_study(study_name="j", storage=journal)
    study.enqueue_trial({"x": 1.0})
    trial = study.trials[0]
    assert optuna_private.journal_study_of(journal, trial).study_name == "j"
    assert optuna_private.journal_worker_id(journal)
    assert optuna_private.journal_file(backend) == str(path)
    assert backend.applying is None  # the replay read every line
    with optuna_private.journal_lock(backend):
        assert path.is_file()


def test_a_storage_view_sees_every_read_of_a_studys_trials(tmp_path: Path) -> None:
    class Empty(StorageView):
        def get_all_trials(self, study_id, deepcopy=True, states=None):  # type: ignore[no-untyped-def]
            return []

    study = optuna.create_study(study_name="v")
    study.enqueue_trial({"x": 1.0})
    view = optuna.Study(study_name="v", storage=Empty(optuna_private.storage_of(study)))
    assert len(study.trials) == 1
    assert view.trials == []
    assert view.get_trials(states=(TrialState.WAITING,)) == []
    assert view.user_attrs == study.user_attrs
