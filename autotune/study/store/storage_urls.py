"""Which storage a URL names, whether it may be opened or created, and how it is shown.

A URL is checked before anything is written: no in-memory SQLite that would lose the study, no
folder created at a typo's path, no write into another program's database, and a password in
it is never printed (`display_url`). autotune.study.store.storage opens what passes.

A database's tables must be Optuna's, and a name is not enough: another program's database
with a table called `trials` passed a check of names, Optuna then added its other tables and a
study row beside it, and failed on the first trial. So each table with one of Optuna's names
must also have Optuna's columns, read from Optuna's own schema, so a new Optuna is followed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sqlite3
from collections.abc import Collection, Mapping
from pathlib import Path
from urllib.parse import unquote

from autotune import variables
from autotune.errors import StudyError


@functools.cache
def optuna_columns() -> dict[str, frozenset[str]]:
    """Optuna's tables (its RDB schema and the migration tool's bookkeeping) and columns."""
    from autotune.study.store.optuna_private import rdb_models as models

    columns = {
        name: frozenset(column.name for column in table.columns)
        for name, table in models.BaseModel.metadata.tables.items()
    }
    columns["alembic_version"] = frozenset({"version_num"})
    return columns


def not_optunas(tables: Mapping[str, Collection[str]]) -> list[str]:
    """The tables (name -> its columns) that Optuna did not make: another name, or one of
    Optuna's names without Optuna's columns. SQLite's own tables (sqlite_*) are left out."""
    expected = optuna_columns()
    found = []
    for name in sorted(tables):
        if name.startswith("sqlite_"):
            continue
        if name not in expected:
            found.append(name)
        elif not expected[name] <= set(tables[name]):
            found.append(f"{name} (not Optuna's columns)")
    return found


def describe(foreign: list[str]) -> str:
    """The first few foreign tables, for a one-line error."""
    return ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")


SQLITE_BUSY_TIMEOUT_ENV = "AUTOTUNE_SQLITE_BUSY_TIMEOUT_S"


def sqlite_busy_timeout_s() -> float:
    """How long SQLite waits for another writer's lock before a write gives up (seconds,
    autotune.variables); the retries after that are autotune.study.store.database's."""
    seconds: float = variables.read(SQLITE_BUSY_TIMEOUT_ENV)
    return seconds


def is_busy(exc: BaseException) -> bool:
    """Whether a database error is another writer holding the lock."""
    text = str(exc).lower()
    return any(marker in text for marker in ("database is locked", "database is busy"))


# Where studies live by default, relative to the working folder.
STUDIES_DIR = Path("studies")


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


# Every value of a storage URL's query is masked when printed: a driver takes a password under
# many names (`password`, `sslpassword`, a token, or a key nobody foresaw, `?pw=`), and which
# values are secret is not for autotune to guess (issue 30). The keys stay, to say what was set.
_QUERY_VALUE = re.compile(r"((?:^|[?&;])[^=&;?]*=)[^&;]*")


def _query_values(values: object) -> tuple[str, ...]:
    return tuple(str(v) for v in (values if isinstance(values, tuple) else (values,)))


def display_url(url: str) -> str:
    """The URL as it may be printed: the password of the user part and every query value are
    masked."""
    if is_journal(url):
        return url
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        shown = parsed.set(query={}).render_as_string(hide_password=True)
        pairs = [
            f"{key}=***" for key, values in parsed.query.items() for _ in _query_values(values)
        ]
        return shown + ("?" + "&".join(pairs) if pairs else "")
    except Exception:  # not a URL SQLAlchemy can read: show what cannot hold a password
        text = url.split("@", 1)[-1] if "@" in url else url
        base, mark, query = text.partition("?")
        return base + mark + _QUERY_VALUE.sub(r"\1***", query) if mark else text


def secrets_in(url: str) -> list[str]:
    """What a URL carries that may be secret: its user part's password and its query values."""
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception:
        return []
    found = [str(parsed.password)] if parsed.password else []
    for values in parsed.query.values():
        # A value of 1 to 3 characters (`?timeout=5`, `?ssl=on`) is no secret worth masking
        # each "5" of a message for; the URL itself is shown masked whole (display_url).
        found += [value for value in _query_values(values) if len(value) >= _SECRET_MIN_CHARS]
    # The longest first: a value inside another is masked with it, not left half-shown.
    return sorted(set(found), key=len, reverse=True)


_SECRET_MIN_CHARS = 4


def _sqlite_location(url: str) -> tuple[bool, Path | None]:
    """(whether `url` is a SQLite URL, the file it names: None for an in-memory database).

    With `uri=true` the database is a SQLite URI (`file:PATH?mode=...`), whose query (split
    off by SQLAlchemy) can make it an in-memory database: `mode=memory`, or `vfs=memdb`.
    """
    if not url.startswith("sqlite"):
        return False, None
    try:
        from sqlalchemy.engine import make_url
        from sqlalchemy.util import asbool

        parsed = make_url(url)
        if parsed.get_backend_name() != "sqlite":
            return False, None
        query = {key.lower(): str(value).lower() for key, value in parsed.query.items()}
        uri = asbool(query.get("uri", False))
    except Exception:  # not a URL SQLAlchemy reads: check_storage_url says so
        return False, None
    name = parsed.database or ""
    if uri:
        if query.get("mode") == "memory" or query.get("vfs") == "memdb":
            return True, None
        if name.startswith("file:"):
            name = unquote(name.removeprefix("file:"))
            if name.startswith("//"):  # file://HOST/PATH: SQLite takes only localhost
                name = "/" + name[2:].partition("/")[2]
    if name in ("", ":memory:"):
        return True, None
    return True, Path(name)


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for another database, or an in-memory one."""
    return _sqlite_location(url)[1]


def local_file(url: str) -> Path | None:
    """The file that holds a study on this machine (SQLite or journal), None for a server."""
    return Path(url) if is_journal(url) else sqlite_file(url)


def check_several_writers(url: str) -> None:
    """Several workers of one run write at once: a SQLite file is refused in one line."""
    if sqlite_file(url) is not None:
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
    path = sqlite_file(url)
    if path is None:
        raise StudyError(
            f"storage '{shown}' is an in-memory SQLite database, which ends with the process "
            "and so loses the study; give a file: sqlite:///studies/NAME.db"
        )
    if url.rstrip().endswith("/") or str(parsed.database).endswith("/"):
        raise StudyError(f"storage '{shown}' names a folder, not a database file")
    others = sorted(set(parsed.query) - _PYSQLITE_ARGUMENTS)
    if others and not str(parsed.database).startswith("file:"):
        # Without uri=true SQLite's driver ignores them (a setting that does nothing); with
        # it, they end up in the file's name unless the database is a `file:` URI.
        raise StudyError(
            f"storage '{shown}': SQLite takes no {', '.join(others)} argument here (it takes "
            f"{', '.join(sorted(_PYSQLITE_ARGUMENTS))}, and SQLite URI parameters in "
            "sqlite:///file:PATH?uri=true&...); remove it"
        )
    _check_local_path(path, shown, create=create)
    _check_sqlite_content(path, shown, create=create)


# What SQLAlchemy passes to Python's sqlite3 (pysqlite's create_connect_args).
_PYSQLITE_ARGUMENTS = frozenset(
    {"uri", "timeout", "isolation_level", "detect_types", "check_same_thread", "cached_statements"}
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
            sqlite3.connect(read_only, uri=True, timeout=sqlite_busy_timeout_s())
        ) as db:
            rows = db.execute("SELECT type, name FROM sqlite_master").fetchall()
            tables = {
                name: [
                    column[1]
                    for column in db.execute("SELECT * FROM pragma_table_info(?)", (name,))
                ]
                for kind, name in rows
                if kind == "table"
            }
            indexes = {name for kind, name in rows if kind == "index"}
            # Optuna makes no views or triggers: one is another program's.
            foreign = not_optunas(tables) + [
                name for kind, name in rows if kind in ("view", "trigger")
            ]
            trials = 0
            if "trials" in tables and not foreign:
                trials = db.execute("SELECT count(*) FROM trials").fetchone()[0]
    except sqlite3.Error as exc:
        if is_busy(exc):
            return  # another run is writing to it: a study, which the open will wait for
        raise StudyError(f"storage '{shown}': {path} cannot be read as SQLite ({exc})") from None
    if foreign:
        raise StudyError(
            f"storage '{shown}': {path} is another program's database (it holds "
            f"{describe(foreign)}); nothing was written to it; give a file of its own for the "
            "study"
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
    if "\0" in str(path):
        raise StudyError(
            f"storage '{shown}': its file name holds a NUL byte (%00), which no file name can "
            "hold; give another path"
        )
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


def artifact_dir(storage_url: str, study_name: str) -> Path:
    """Where a study's artifacts (sample outputs per trial) live: beside its SQLite file."""
    stored = local_file(storage_url)
    if stored is not None:
        return stored.with_name(f"{stored.stem}-artifacts")
    return STUDIES_DIR / f"{study_name}-artifacts"
