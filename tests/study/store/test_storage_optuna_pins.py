"""autotune.study.store.storage wraps Optuna's storages method by method, five of them private (what
Optuna's cached storage calls instead of the public ones). These tests pin that surface to the
installed Optuna: a renamed, removed or new write method fails here, not in a user's study."""

from __future__ import annotations

import inspect

import optuna

from autotune.study.store import storage

# Public writes autotune never makes: a study is never deleted by autotune.
NOT_WRITTEN_BY_AUTOTUNE = {"delete_study"}
WRITE_PREFIXES = ("create_", "set_", "delete_")


def _public_methods(cls: type) -> set[str]:
    return {
        name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")
    }


def test_every_wrapped_name_exists_on_the_installed_storages() -> None:
    rdb = optuna.storages.RDBStorage
    names = (*storage._WRITES, *storage._READS, *storage._CACHED_WRITES, *storage._CACHED_READS)
    missing = [name for name in names if not callable(getattr(rdb, name, None))]
    assert not missing, f"Optuna {optuna.__version__} has no RDBStorage.{missing}"
    missing = [
        n for n in storage._WRITES if not callable(getattr(optuna.storages.JournalStorage, n, None))
    ]
    assert not missing, f"Optuna {optuna.__version__} has no JournalStorage.{missing}"
    # Each is really replaced on autotune's classes, not inherited unwrapped.
    unwrapped = [n for n in names if n not in vars(storage.RetryingRDBStorage)]
    unwrapped += [n for n in storage._WRITES if n not in vars(storage.GuardedJournalStorage)]
    assert not unwrapped, unwrapped


def test_every_public_write_of_optunas_storage_is_wrapped_or_named_unused() -> None:
    writes = {
        name
        for name in _public_methods(optuna.storages.BaseStorage)
        if name.startswith(WRITE_PREFIXES)
    }
    assert writes, "no write methods found: the storage interface changed shape"
    uncovered = writes - set(storage._WRITES) - NOT_WRITTEN_BY_AUTOTUNE
    assert not uncovered, f"new Optuna storage writes, wrap them: {sorted(uncovered)}"
    # And nothing wrapped that the interface no longer has.
    assert set(storage._WRITES) <= writes


def test_every_public_read_of_optunas_storage_is_wrapped_or_derived() -> None:
    reads = {n for n in _public_methods(optuna.storages.BaseStorage) if n.startswith("get_")}
    # Derived in BaseStorage from the wrapped reads (get_all_trials, get_trial), so a lock
    # wait they meet is already retried.
    derived = {"get_n_trials", "get_trial_number_from_id", "get_trial_params"}
    assert not derived & set(vars(optuna.storages.RDBStorage)), "RDBStorage now reads them itself"
    uncovered = reads - set(storage._READS) - derived
    assert not uncovered, f"new Optuna storage reads, wrap them: {sorted(uncovered)}"
