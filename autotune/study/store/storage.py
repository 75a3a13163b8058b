"""Where studies live: SQLite under studies/ by default, any SQLAlchemy URL otherwise.

Several workers on one host (`autotune run --gpus 0,1`) write to one study at once, which
SQLite does not take well under load; they share an Optuna journal file instead
(`studies/<study>.journal`, JournalStorage with its file backend and lock). Several hosts
share PostgreSQL. A storage is named by a SQLAlchemy URL or by the path of a `.journal` file.

Commands that only read a study (best, export, report, verify, dashboard) never create a
database: a missing one is reported, not made. A URL is checked before anything is written
(no in-memory SQLite that would lose the study, no folder created at a typo's path), and a
password in it is never printed (`display_url`).

Reads and writes wait for a busy database (SQLite's busy timeout) and are retried with backoff
when it stays locked (autotune.study.store.database), so another process holding a write lock
costs time, not a measured trial.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import tenacity
from optuna.trial import FrozenTrial

from autotune.errors import StudyError
from autotune.records.checks import objective_metrics
from autotune.records.readable import ReadableView
from autotune.study.store.database import (
    LOCKED_RETRY,
    WRITE_RETRIES,
    WRITES,
    RetryingStorage,
    StorageUnavailable,
    headline,
    masked,
)
from autotune.study.store.journal import WholeRecordJournal, repair_tail, tail_note
from autotune.study.store.optuna_private import journal_study_of, journal_worker_id, trial_id
from autotune.study.store.recovery import failure_of, heartbeat_grace_s, record_stale
from autotune.study.store.snapshot import read_study
from autotune.study.store.storage_urls import (
    JOURNAL_SUFFIX,
    STUDIES_DIR,
    artifact_dir,
    check_several_writers,
    check_storage_url,
    default_storage_url,
    describe,
    display_url,
    is_journal,
    local_file,
    not_optunas,
    sqlite_busy_timeout_s,
    sqlite_file,
)


def open_storage(url: str, *, create: bool) -> optuna.storages.BaseStorage:
    """The study's storage; with create=False a missing file is an error, not a new file.

    A file this call creates is removed again when the storage cannot be opened in it (a full
    disk, a folder that refuses it), so a failed run leaves nothing behind.
    """
    check_storage_url(url, create=create)
    created = local_file(url)
    if created is not None and created.exists():
        created = None  # not ours to remove
    try:
        if is_journal(url):
            return _open_journal(Path(url), create=create)
        return _open_database(url, create=create)
    except BaseException:
        if created is not None:
            remove_study_file(created)
        raise


def remove_study_file(path: Path) -> None:
    """A database file and what SQLite or the journal keep beside it."""
    for companion in (path, *(path.with_name(path.name + s) for s in _COMPANION_SUFFIXES)):
        # ValueError: a name with a NUL byte, which no file has (nothing to remove).
        with contextlib.suppress(OSError, ValueError):
            companion.unlink()


# SQLite's rollback journal and write-ahead log; the journal storage's lock file.
_COMPANION_SUFFIXES = ("-journal", "-wal", "-shm", ".lock")


def _open_database(url: str, *, create: bool) -> optuna.storages.BaseStorage:
    shown = display_url(url)
    database = sqlite_file(url)
    engine_kwargs: dict[str, Any] = {}
    if database is not None:
        if not create and not database.is_file():
            raise StudyError(
                f"no study database at {database}; run `autotune run --space NAME` first "
                "or pass --storage URL"
            )
        database.parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs = {"connect_args": {"timeout": sqlite_busy_timeout_s()}}
    else:
        _check_server_tables(url, shown)
    kwargs: dict[str, Any] = {"engine_kwargs": engine_kwargs}
    if create:
        # A heartbeat lets a later run (or another machine) fail trials whose process died;
        # the callback says so in the trial's failure_reason.
        grace = heartbeat_grace_s()
        kwargs |= {
            "heartbeat_interval": max(1, min(30, grace // 4)),
            "grace_period": grace,
            "heartbeat_stale_trial_callback": record_stale,
        }
    # Two machines starting on an empty database race to create Optuna's tables; the loser
    # sees a duplicate and only has to open what the winner created.
    schema_race = tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda exc: _is_schema_race(headline(exc))),
        stop=tenacity.stop_after_attempt(_SCHEMA_RACE_RETRIES + 1),
        wait=tenacity.wait_incrementing(start=1, increment=1),
        reraise=True,
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # Opening reads Optuna's schema version: a locked database is waited out too.
            return RetryingStorage(
                LOCKED_RETRY.copy()(schema_race, optuna.storages.RDBStorage, url, **kwargs)
            )
    except ImportError as exc:
        raise StudyError(f"storage '{shown}' needs a database driver: {exc}") from None
    except Exception as exc:
        raise StudyError(f"cannot open storage '{shown}': {masked(headline(exc), url)}") from None


def _check_server_tables(url: str, shown: str) -> None:
    """A database server's database holds Optuna's tables only (or none yet)."""
    try:
        from sqlalchemy import create_engine, inspect

        engine = create_engine(url)
    except ImportError as exc:
        raise StudyError(f"storage '{shown}' needs a database driver: {exc}") from None
    except Exception as exc:
        message = masked(str(exc), url)
        raise StudyError(f"storage '{shown}' is not a database URL: {message}") from None
    try:
        inspector = inspect(engine)
        tables = {
            name: [column["name"] for column in inspector.get_columns(name)]
            for name in inspector.get_table_names()
        }
    except Exception as exc:
        raise StudyError(f"cannot open storage '{shown}': {masked(headline(exc), url)}") from None
    finally:
        engine.dispose()
    foreign = not_optunas(tables)
    if foreign:
        raise StudyError(
            f"storage '{shown}' holds tables of another program ({describe(foreign)}); nothing "
            "was written to it; give a database of its own for studies"
        )


_SAID: set[str] = set()


def _open_journal(path: Path, *, create: bool) -> optuna.storages.BaseStorage:
    if not create and not path.is_file():
        raise StudyError(
            f"no study journal at {path}; run `autotune run --space NAME --gpus ...` first"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    from optuna.storages.journal import JournalFileOpenLock

    # The open lock (O_EXCL lock file) rather than Optuna's default symlink lock: both work on
    # a local disk, and this one also on file systems without symlinks. Its 30 s grace period
    # breaks a lock that a killed process left behind.
    try:
        backend = WholeRecordJournal(str(path), lock_obj=JournalFileOpenLock(str(path)))
        # A run appends: a torn last record is cut off first; a reader only says it is there.
        note = repair_tail(backend) if create else tail_note(path)
        if note and note not in _SAID:  # a command that opens the study twice says it once
            _SAID.add(note)
            print(f"note: {note}", file=sys.stderr)
        return GuardedJournalStorage(backend)
    except OSError as exc:
        raise StudyError(f"cannot open storage '{path}': {exc.strerror or exc}") from None


class GuardedJournalStorage(optuna.storages.JournalStorage):
    """Optuna's journal storage whose failed writes (disk full) are one StorageUnavailable
    line, the measured results staying in the spool, as for a database; a line it cannot
    replay is one line too (autotune.study.store.journal), and an unreadable trial a stand-in.
    Every public method, and the replay at construction, pass through `_replay_guarded`."""

    _view: ReadableView | None = None

    def __init__(self, backend: WholeRecordJournal) -> None:
        self.backend = backend
        _replay_guarded(optuna.storages.JournalStorage.__init__)(self, backend)

    def _shown(self, trial: FrozenTrial) -> FrozenTrial:
        if self._view is None:
            self._view = ReadableView()
        study = journal_study_of(self, trial)
        metrics = objective_metrics(study.user_attrs)
        return self._view(trial, len(study.directions), metrics, trial_id=trial_id(trial))

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self._shown(super().get_trial(trial_id))

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Any = None
    ) -> list[FrozenTrial]:
        shown = [self._shown(t) for t in super().get_all_trials(study_id, deepcopy=False)]
        kept = [t for t in shown if states is None or t.state in states]
        return copy.deepcopy(kept) if deepcopy else kept


def _replay_guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method`, whose failure to replay a journal line is that line's refusal: each call
    reads the lines other processes appended first."""

    @functools.wraps(method)
    def wrapper(self: GuardedJournalStorage, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            with contextlib.suppress(AttributeError):  # no worker before Optuna's own start
                refusal = self.backend.refused(exc, journal_worker_id(self))
                if refusal is not None:
                    raise refusal from None
            raise

    return wrapper


def _journal_guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: GuardedJournalStorage, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise StorageUnavailable(
                f"cannot write to the study's journal: {exc.strerror or exc}"
            ) from exc

    return wrapper


for _name in sorted({*optuna.storages.BaseStorage.__abstractmethods__, *WRITES}):
    _method = vars(GuardedJournalStorage).get(_name) or getattr(
        optuna.storages.JournalStorage, _name
    )
    _method = _replay_guarded(_method)
    setattr(GuardedJournalStorage, _name, _journal_guarded(_method) if _name in WRITES else _method)

_SCHEMA_RACE_RETRIES = 3


def _is_schema_race(message: str) -> bool:
    lowered = message.lower()
    return any(
        marker in lowered for marker in ("duplicate key", "already exists", "uniqueviolation")
    )


def _most_recent_study() -> str:
    """The study of the newest database under studies/ (what `run` wrote last)."""
    candidates = sorted(
        [*STUDIES_DIR.glob("*.db"), *STUDIES_DIR.glob(f"*{JOURNAL_SUFFIX}")],
        key=lambda p: p.stat().st_mtime,
    )
    if not candidates:
        raise StudyError(
            f"no study databases in {STUDIES_DIR}/; run `autotune run --space NAME` first, "
            "or name one with --study NAME / --storage URL"
        )
    if len(candidates) > 1:
        print(
            f"(using study '{candidates[-1].stem}', the newest in {STUDIES_DIR}/; "
            "pass --study NAME to choose another)",
            file=sys.stderr,
        )
    return candidates[-1].stem


def load_study(study_name: str | None, storage_url: str | None) -> optuna.Study:
    """Load an existing study for reading, as a snapshot; names the studies that exist when it
    is missing."""
    if study_name is None and storage_url is None:
        study_name = _most_recent_study()
    url = storage_url or default_storage_url(study_name or "")
    storage = open_storage(url, create=False)
    names = [s.study_name for s in storage.get_all_studies()]
    if study_name is None:
        if len(names) != 1:
            raise StudyError(
                f"storage '{display_url(url)}' holds {len(names)} studies; pick one with "
                f"--study ({', '.join(names) or 'none'})"
            )
        study_name = names[0]
    if study_name not in names:
        raise StudyError(
            f"no study '{study_name}' in '{display_url(url)}'; studies there: "
            f"{', '.join(names) or 'none'}"
        )
    if names.count(study_name) > 1:
        # Optuna keeps names unique; two rows of one name come from an edit of the database.
        raise StudyError(
            f"storage '{display_url(url)}' holds {names.count(study_name)} studies named "
            f"'{study_name}' (the database was edited): rename or delete all but one"
        )
    return read_study(storage, study_name)


# The URL checks live in storage_urls; the names callers know from here stay importable.
__all__ = [
    "JOURNAL_SUFFIX",
    "STUDIES_DIR",
    "WRITE_RETRIES",
    "GuardedJournalStorage",
    "RetryingStorage",
    "StorageUnavailable",
    "artifact_dir",
    "check_several_writers",
    "check_storage_url",
    "default_storage_url",
    "display_url",
    "failure_of",
    "heartbeat_grace_s",
    "is_journal",
    "load_study",
    "local_file",
    "open_storage",
    "remove_study_file",
]
