"""Where studies live: SQLite under studies/ by default, any SQLAlchemy URL otherwise.

Several workers on one host (`autotune run --gpus 0,1`) write to one study at once, which
SQLite does not take well under load; they share an Optuna journal file instead
(`studies/<study>.journal`, JournalStorage with its file backend and lock). Several hosts
share PostgreSQL. A storage is named by a SQLAlchemy URL or by the path of a `.journal` file.

Commands that only read a study (best, export, report, verify, dashboard) never create a
database: a missing one is reported, not made. A URL is checked before anything is written
(no in-memory SQLite that would lose the study, no folder created at a typo's path), and a
password in it is never printed (`display_url`).

Writes wait for a busy database (SQLite's busy timeout) and are retried with backoff when it
stays locked (`RetryingRDBStorage`), so another process holding a write lock costs time, not
a measured trial.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import sqlite3
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.errors import StudyError

STUDIES_DIR = Path("studies")
# How long SQLite waits for another writer's lock before a write gives up (seconds), and the
# retries after that (with backoff), before the storage is reported unavailable.
SQLITE_BUSY_TIMEOUT_S = 30.0
WRITE_RETRIES = 6


# A trial whose process sent no heartbeat for this long is failed by the next run or host.
HEARTBEAT_GRACE_S = 120
HEARTBEAT_GRACE_ENV = "AUTOTUNE_HEARTBEAT_GRACE_S"


def heartbeat_grace_s() -> int:
    """The grace period: 120 s, or AUTOTUNE_HEARTBEAT_GRACE_S (at least 2 s)."""
    try:
        return max(2, int(os.environ.get(HEARTBEAT_GRACE_ENV, HEARTBEAT_GRACE_S)))
    except ValueError:
        return HEARTBEAT_GRACE_S


class StorageUnavailable(StudyError):
    """A write to the study's storage still failed after its retries (locked, disk full)."""


JOURNAL_SUFFIX = ".journal"


def is_journal(url: str) -> bool:
    """A journal file's path (`studies/s.journal`), not a database URL."""
    return "://" not in url and url.endswith(JOURNAL_SUFFIX)


def default_storage_url(study_name: str, *, several_writers: bool = False) -> str:
    """studies/<study>.db, or its journal file when it has one or several workers share it."""
    journal = STUDIES_DIR / f"{study_name}{JOURNAL_SUFFIX}"
    sqlite = STUDIES_DIR / f"{study_name}.db"
    if journal.is_file():
        return str(journal)
    if several_writers:
        if sqlite.is_file():
            raise StudyError(
                f"study '{study_name}' is stored in SQLite ({sqlite}), which several workers "
                "cannot share safely; run it on one GPU, or start a new --study for --gpus "
                "(it is stored in a journal file)"
            )
        return str(journal)
    return f"sqlite:///{sqlite}"


# Query parameters that carry a secret (`?password=...`, libpq's `sslpassword`, a token).
_SECRET_KEY = re.compile(r"pass|pwd|secret|token", re.IGNORECASE)
_SECRET_QUERY = re.compile(r"((?:^|[?&;])[^=&;?]*(?:pass|pwd|secret|token)[^=&;]*=)[^&;]*", re.I)


def display_url(url: str) -> str:
    """The URL as it may be printed: a password is masked, in the user part and the query."""
    if is_journal(url):
        return url
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        shown = parsed.set(query={}).render_as_string(hide_password=True)
        pairs = [
            f"{key}={'***' if _SECRET_KEY.search(key) else value}"
            for key, values in parsed.query.items()
            for value in (values if isinstance(values, tuple) else (values,))
        ]
        return shown + ("?" + "&".join(pairs) if pairs else "")
    except Exception:  # not a URL SQLAlchemy can read: show what cannot hold a password
        text = url.split("@", 1)[-1] if "@" in url else url
        return _SECRET_QUERY.sub(r"\1***", text)


def _secrets(url: str) -> list[str]:
    """The passwords a URL carries: its user part's and its query's."""
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:
        return []
    found = [str(parsed.password)] if parsed.password else []
    for key, values in parsed.query.items():
        if _SECRET_KEY.search(key):
            found += [v for v in (values if isinstance(values, tuple) else (values,)) if v]
    return found


def _sqlite_file(url: str) -> Path | None:
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///"))
    return None


def local_file(url: str) -> Path | None:
    """The file that holds a study on this machine (SQLite or journal), None for a server."""
    return Path(url) if is_journal(url) else _sqlite_file(url)


def check_several_writers(url: str) -> None:
    """Several workers of one run write at once: a SQLite file is refused in one line."""
    if _sqlite_file(url) is not None:
        raise StudyError(
            f"storage '{display_url(url)}': several workers (--gpus) cannot share a SQLite "
            "database safely; leave --storage out (a journal file under studies/ is used), "
            "or give a .journal path or a PostgreSQL URL"
        )


def check_storage_url(url: str, *, create: bool) -> None:
    """One StudyError line for a URL that cannot hold a study; nothing is written."""
    shown = display_url(url)
    if is_journal(url):
        _check_local_path(Path(url), shown, create=create)
        _check_journal_content(Path(url), shown)
        return
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:
        raise StudyError(
            f"storage '{shown}' is not a database URL; write e.g. sqlite:///studies/s.db or "
            "postgresql+psycopg://user@host/db"
        ) from None
    if parsed.get_backend_name() != "sqlite":
        return
    name = parsed.database
    if not name or name == ":memory:" or name.startswith("file::memory:"):
        raise StudyError(
            f"storage '{shown}' is an in-memory SQLite database, which ends with the process "
            "and so loses the study; give a file: sqlite:///studies/NAME.db"
        )
    if url.rstrip().endswith("/"):
        raise StudyError(f"storage '{shown}' names a folder, not a database file")
    _check_local_path(Path(name), shown, create=create)
    _check_sqlite_content(Path(name), shown, create=create)


# Optuna's own tables (its RDB schema, and the migration tool's bookkeeping): a database that
# holds any other table belongs to another program, which a study must not write into.
OPTUNA_TABLES = frozenset(
    {
        "studies",
        "study_directions",
        "study_system_attributes",
        "study_user_attributes",
        "trial_heartbeats",
        "trial_intermediate_values",
        "trial_params",
        "trial_system_attributes",
        "trial_user_attributes",
        "trial_values",
        "trials",
        "version_info",
        "alembic_version",
    }
)
# What an Optuna schema that was created to the end always has (the unique study name).
_SCHEMA_COMPLETE_INDEX = "ix_studies_study_name"
_SQLITE_HEADER = b"SQLite format 3\x00"


def _check_journal_content(path: Path, shown: str) -> None:
    """An existing journal starts with one of Optuna's JSON log records."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb") as handle:
        first = handle.readline(1 << 20)
    try:
        record = json.loads(first)
    except (ValueError, RecursionError):
        record = None
    if not isinstance(record, dict) or "op_code" not in record:
        raise StudyError(
            f"storage '{shown}': {path} is not an Optuna journal; give another file (a new one "
            "is created)"
        )


def _check_sqlite_content(path: Path, shown: str, *, create: bool) -> None:
    """An existing SQLite file holds Optuna's tables only. A schema left half-made by a run
    that failed while creating it (a full disk), with no trial in it, is removed by a run
    (create=True) and reported by a reader."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb") as handle:
        header = handle.read(len(_SQLITE_HEADER))
    if header != _SQLITE_HEADER:
        raise StudyError(f"storage '{shown}': {path} is not a SQLite database; give another file")
    read_only = f"{path.resolve().as_uri()}?mode=ro"
    try:
        with contextlib.closing(
            sqlite3.connect(read_only, uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
        ) as db:
            rows = db.execute("SELECT type, name FROM sqlite_master").fetchall()
            tables = {name for kind, name in rows if kind == "table"}
            indexes = {name for kind, name in rows if kind == "index"}
            trials = 0
            if "trials" in tables:
                trials = db.execute("SELECT count(*) FROM trials").fetchone()[0]
    except sqlite3.Error as exc:
        if _is_busy(exc):
            return  # another run is writing to it: a study, which the open will wait for
        raise StudyError(f"storage '{shown}': {path} cannot be read as SQLite ({exc})") from None
    foreign = sorted(name for name in tables - OPTUNA_TABLES if not name.startswith("sqlite_"))
    if foreign:
        raise StudyError(
            f"storage '{shown}': {path} is another program's database (it holds "
            f"{', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); give a file of "
            "its own for the study"
        )
    if tables and _SCHEMA_COMPLETE_INDEX not in indexes and not trials:
        # Nothing measured is in it, and Optuna would add studies of the same name to it.
        if not create:
            raise StudyError(
                f"storage '{shown}': {path} holds a study schema a run could not finish "
                "creating, and no trial; `autotune run` with it starts afresh"
            )
        path.unlink()


def _check_local_path(path: Path, shown: str, *, create: bool) -> None:
    """A study file: a regular file (or none yet, in a folder autotune may write to)."""
    if path.name in ("", ".", ".."):
        raise StudyError(f"storage '{shown}' names a folder, not a database file")
    if path.is_dir():
        raise StudyError(f"storage '{shown}': {path} is a folder, not a database file")
    if path.exists() and not path.is_file():
        # Opening a FIFO would wait for a writer forever; a device is nobody's study.
        raise StudyError(
            f"storage '{shown}': {path} is not a regular file (a FIFO, socket or device); "
            "give a database file"
        )
    parent = path.parent
    if create and not parent.is_dir() and parent.resolve() != STUDIES_DIR.resolve():
        raise StudyError(
            f"storage '{shown}': the folder {parent} does not exist; create it first (only "
            f"{STUDIES_DIR}/ is made for you)"
        )
    if path.is_file():
        wanted = os.R_OK | (os.W_OK if create else 0)
        if not os.access(path, wanted):
            how = "read and write" if create else "read"
            raise StudyError(f"storage '{shown}': no permission to {how} {path}")
    elif create and parent.is_dir() and not _can_create_in(parent):
        raise StudyError(
            f"storage '{shown}': cannot create a file in {parent} (read-only, or not a disk "
            "folder); give a path in a folder you can write to"
        )


# Kernel file systems hold no user files: os.access says root may write there, open says no.
_PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"))


def _can_create_in(folder: Path) -> bool:
    resolved = folder.resolve()
    if any(resolved == root or root in resolved.parents for root in _PSEUDO_FILESYSTEMS):
        return False
    if not os.access(resolved, os.W_OK | os.X_OK):
        return False
    try:
        return not os.statvfs(resolved).f_flag & os.ST_RDONLY
    except OSError:
        return False


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
        with contextlib.suppress(OSError):
            companion.unlink()


# SQLite's rollback journal and write-ahead log; the journal storage's lock file.
_COMPANION_SUFFIXES = ("-journal", "-wal", "-shm", ".lock")


def _open_database(url: str, *, create: bool) -> optuna.storages.BaseStorage:
    shown = display_url(url)
    sqlite_file = _sqlite_file(url)
    engine_kwargs: dict[str, Any] = {}
    if sqlite_file is not None:
        if not create and not sqlite_file.is_file():
            raise StudyError(
                f"no study database at {sqlite_file}; run `autotune run --space NAME` first "
                "or pass --storage URL"
            )
        sqlite_file.parent.mkdir(parents=True, exist_ok=True)
        engine_kwargs = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
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
            "heartbeat_stale_trial_callback": _record_stale,
        }
    for attempt in range(_SCHEMA_RACE_RETRIES + 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return RetryingRDBStorage(url, **kwargs)
        except ImportError as exc:
            raise StudyError(f"storage '{shown}' needs a database driver: {exc}") from None
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            # Two machines starting on an empty database race to create Optuna's tables; the
            # loser sees a duplicate and only has to open what the winner created.
            if attempt < _SCHEMA_RACE_RETRIES and _is_schema_race(first):
                time.sleep(1.0 + attempt)
                continue
            raise StudyError(f"cannot open storage '{shown}': {_masked(first, url)}") from None
    raise AssertionError("unreachable")


def _check_server_tables(url: str, shown: str) -> None:
    """A database server's database holds Optuna's tables only (or none yet)."""
    try:
        from sqlalchemy import create_engine, inspect

        engine = create_engine(url)
    except ImportError as exc:
        raise StudyError(f"storage '{shown}' needs a database driver: {exc}") from None
    except Exception as exc:
        message = _masked(str(exc), url)
        raise StudyError(f"storage '{shown}' is not a database URL: {message}") from None
    try:
        tables = set(inspect(engine).get_table_names())
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StudyError(f"cannot open storage '{shown}': {_masked(first, url)}") from None
    finally:
        engine.dispose()
    foreign = sorted(tables - OPTUNA_TABLES)
    if foreign:
        raise StudyError(
            f"storage '{shown}' holds tables of another program ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}); give a database of its own for studies"
        )


def _open_journal(path: Path, *, create: bool) -> optuna.storages.BaseStorage:
    if not create and not path.is_file():
        raise StudyError(
            f"no study journal at {path}; run `autotune run --space NAME --gpus ...` first"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    # The open lock (O_EXCL lock file) rather than Optuna's default symlink lock: both work on
    # a local disk, and this one also on file systems without symlinks. Its 30 s grace period
    # breaks a lock that a killed process left behind.
    try:
        backend = JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path)))
        return GuardedJournalStorage(backend)
    except OSError as exc:
        raise StudyError(f"cannot open storage '{path}': {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:  # a line that is not Optuna's JSON
        raise StudyError(
            f"storage '{path}' is not a readable Optuna journal ({type(exc).__name__}); give "
            "another file"
        ) from None


class GuardedJournalStorage(optuna.storages.JournalStorage):
    """Optuna's journal storage whose failed writes (disk full) are one StorageUnavailable
    line, the measured results staying in the spool, as for a database."""


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


def _masked(message: str, url: str) -> str:
    """`message` without the passwords of `url`, wherever a driver quoted them."""
    for secret in _secrets(url):
        message = message.replace(secret, "***")
    return message


# A study attribute per trial Optuna's heartbeat failed: the trial itself is FAIL by then, and
# Optuna refuses any write to a finished trial.
LOST_ATTR_PREFIX = "lost_trial_"


def _record_stale(study: optuna.Study, trial: FrozenTrial) -> None:
    """Optuna failed a trial whose process stopped sending heartbeats: say so, for the
    trial, in the study (see failure_of)."""
    reason = (
        "its process stopped sending heartbeats (killed, or its machine went away); failed "
        f"by a later run after {heartbeat_grace_s()} s"
    )
    study.set_user_attr(
        f"{LOST_ATTR_PREFIX}{trial.number}", {"failure_kind": "lost", "failure_reason": reason}
    )


def failure_of(study: optuna.Study, trial: FrozenTrial) -> dict[str, str]:
    """A failed trial's failure_kind and failure_reason, wherever they were recorded."""
    found = {
        key: str(trial.user_attrs[key])
        for key in ("failure_kind", "failure_reason")
        if trial.user_attrs.get(key)
    }
    if found:
        return found
    # A study attribute, written when Optuna's heartbeat had already finished the trial.
    lost = study.user_attrs.get(f"{LOST_ATTR_PREFIX}{trial.number}")
    return dict(lost or {})


def _is_busy(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in ("database is locked", "database is busy"))


def _database_error(exc: BaseException) -> BaseException | None:
    """The database's own refusal behind `exc` (Optuna wraps it in StorageInternalError):
    locked, disk full, I/O. An IntegrityError is Optuna's business (a duplicate study)."""
    from sqlalchemy.exc import OperationalError

    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 5:
        if isinstance(current, OperationalError):
            return current
        current, seen = current.__cause__ or current.__context__, seen + 1
    return None


def _retrying(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: RetryingRDBStorage, *args: Any, **kwargs: Any) -> Any:
        for attempt in range(WRITE_RETRIES + 1):
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:
                refusal = _database_error(exc)
                if refusal is None:
                    raise  # Optuna's own errors (DuplicatedStudyError, ...) stay as they are
                if not _is_busy(refusal) or attempt == WRITE_RETRIES:
                    why = _masked(_first_line(refusal), str(getattr(self, "url", "")))
                    raise StorageUnavailable(f"cannot write to the study's storage: {why}") from exc
                time.sleep(min(10.0, 0.5 * 2**attempt) * random.uniform(0.8, 1.2))
        raise AssertionError("unreachable")

    return wrapper


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.splitlines()[0] if text else type(exc).__name__


class RetryingRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose writes wait out a locked database, then fail in one line.

    A write that still fails (the lock outlived the retries, the disk is full) raises
    StorageUnavailable, which `autotune run` prints as one line, keeping the trial's results
    in its spool (autotune.study.recovery) for the next run to record.
    """


# Every storage method that writes: wrapped so a refused write is one StorageUnavailable line.
_WRITES = (
    "create_new_study",
    "set_study_user_attr",
    "set_study_system_attr",
    "create_new_trial",
    "set_trial_param",
    "set_trial_state_values",
    "set_trial_intermediate_value",
    "set_trial_user_attr",
    "set_trial_system_attr",
)
for _name in _WRITES:
    setattr(RetryingRDBStorage, _name, _retrying(getattr(optuna.storages.RDBStorage, _name)))


def _best_effort(method: Callable[..., Any]) -> Callable[..., Any]:
    """A heartbeat written from Optuna's background thread: a refused one is skipped, since an
    exception there is only a traceback on stderr. The trial's own next write, in the main
    thread, reports the storage in one line; a later beat tries again."""

    @functools.wraps(method)
    def wrapper(self: RetryingRDBStorage, *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(StorageUnavailable):
            return method(self, *args, **kwargs)
        return None

    return wrapper


RetryingRDBStorage.record_heartbeat = _best_effort(  # type: ignore[method-assign]
    _retrying(optuna.storages.RDBStorage.record_heartbeat)
)
for _name in _WRITES:
    journal_write = getattr(optuna.storages.JournalStorage, _name)
    setattr(GuardedJournalStorage, _name, _journal_guarded(journal_write))

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
    """Load an existing study for reading; names the studies that exist when it is missing."""
    if study_name is None and storage_url is None:
        study_name = _most_recent_study()
    url = storage_url or default_storage_url(study_name or "")
    storage = open_storage(url, create=False)
    names = [s.study_name for s in optuna.study.get_all_study_summaries(storage)]
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
    return optuna.load_study(study_name=study_name, storage=storage)


def artifact_dir(storage_url: str, study_name: str) -> Path:
    """Where a study's artifacts (sample outputs per trial) live: beside its SQLite file."""
    stored = local_file(storage_url)
    if stored is not None:
        return stored.with_name(f"{stored.stem}-artifacts")
    return STUDIES_DIR / f"{study_name}-artifacts"
