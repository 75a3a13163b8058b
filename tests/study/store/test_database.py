"""A locked database costs time, not a trial: each call Optuna makes through its cached storage
is retried whole by the storage that wraps it (autotune.study.store.database), including the
calls the cache makes through its backend's private methods."""

from __future__ import annotations

import sqlite3
import threading
import warnings
from pathlib import Path

import optuna
import pytest

from autotune.study.store.database import RetryingStorage
from autotune.study.store.storage import open_storage


@pytest.mark.slow
def test_a_parameter_chosen_while_another_process_holds_the_lock_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite gives up after 0.2 s; the lock below lasts ten times that, so only the retries
    # can store the parameter.
    monkeypatch.setenv("AUTOTUNE_SQLITE_BUSY_TIMEOUT_S", "0.2")
    db = tmp_path / "s.db"
    storage = open_storage(f"sqlite:///{db}", create=True)
    assert isinstance(storage, RetryingStorage)
    study = optuna.create_study(study_name="s", storage=storage)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a heartbeat outside optimize
        trial = study.ask()
    lock = sqlite3.connect(db, timeout=60, isolation_level=None, check_same_thread=False)
    lock.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(2.0, lambda: lock.execute("COMMIT"))
    release.start()
    try:
        # Optuna's cache writes a first parameter through its backend's _set_trial_param.
        chosen = trial.suggest_int("x", 0, 3)
    finally:
        release.join()
        lock.close()
    assert study.trials[0].params == {"x": chosen}
