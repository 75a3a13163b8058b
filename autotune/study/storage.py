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

import functools
import os
import random
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


def display_url(url: str) -> str:
    """The URL as it may be printed: a password is masked."""
    if is_journal(url):
        return url
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can read: show what cannot hold a password
        return url.split("@", 1)[-1] if "@" in url else url


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


def _check_local_path(path: Path, shown: str, *, create: bool) -> None:
    if path.name in ("", ".", ".."):
        raise StudyError(f"storage '{shown}' names a folder, not a database file")
    if path.is_dir():
        raise StudyError(f"storage '{shown}': {path} is a folder, not a database file")
    parent = path.parent
    if create and not parent.is_dir() and parent.resolve() != STUDIES_DIR.resolve():
        raise StudyError(
            f"storage '{shown}': the folder {parent} does not exist; create it first (only "
            f"{STUDIES_DIR}/ is made for you)"
        )


def open_storage(url: str, *, create: bool) -> optuna.storages.BaseStorage:
    """The study's storage; with create=False a missing file is an error, not a new file."""
    check_storage_url(url, create=create)
    if is_journal(url):
        return _open_journal(Path(url), create=create)
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
    backend = JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path)))
    return GuardedJournalStorage(backend)


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
    """`message` without the password of `url`, wherever a driver quoted it."""
    try:
        from sqlalchemy.engine import make_url

        password = make_url(url).password
    except Exception:
        password = None
    return message.replace(str(password), "***") if password else message


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
                    raise StorageUnavailable(
                        f"cannot write to the study's storage: {_first_line(refusal)}"
                    ) from exc
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
for _name in (*_WRITES, "record_heartbeat"):
    setattr(RetryingRDBStorage, _name, _retrying(getattr(optuna.storages.RDBStorage, _name)))
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
