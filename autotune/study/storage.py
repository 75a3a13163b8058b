"""Where studies live: SQLite under studies/ by default, any SQLAlchemy URL otherwise.

Commands that only read a study (best, export, report, verify, dashboard) never create a
database: a missing one is reported, not made.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import optuna

from autotune.errors import StudyError

STUDIES_DIR = Path("studies")


def default_storage_url(study_name: str) -> str:
    return f"sqlite:///{STUDIES_DIR / study_name}.db"


def _sqlite_file(url: str) -> Path | None:
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///"))
    return None


def open_storage(url: str, *, create: bool) -> optuna.storages.RDBStorage:
    """An RDB storage; with create=False a missing SQLite file is an error, not a new file."""
    sqlite_file = _sqlite_file(url)
    if sqlite_file is not None:
        if not create and not sqlite_file.is_file():
            raise StudyError(
                f"no study database at {sqlite_file}; run `autotune run --space NAME` first "
                "or pass --storage URL"
            )
        sqlite_file.parent.mkdir(parents=True, exist_ok=True)
    kwargs = {}
    if create:
        # A heartbeat lets a later run (or another machine) fail trials whose process died.
        kwargs = {"heartbeat_interval": 30, "grace_period": 120}
    for attempt in range(_SCHEMA_RACE_RETRIES + 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, **kwargs)
        except ImportError as exc:
            raise StudyError(f"storage '{url}' needs a database driver: {exc}") from None
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            # Two machines starting on an empty database race to create Optuna's tables; the
            # loser sees a duplicate and only has to open what the winner created.
            if attempt < _SCHEMA_RACE_RETRIES and _is_schema_race(first):
                time.sleep(1.0 + attempt)
                continue
            raise StudyError(f"cannot open storage '{url}': {first}") from None
    raise AssertionError("unreachable")


_SCHEMA_RACE_RETRIES = 3


def _is_schema_race(message: str) -> bool:
    lowered = message.lower()
    return any(
        marker in lowered for marker in ("duplicate key", "already exists", "uniqueviolation")
    )


def _most_recent_study() -> str:
    """The study of the newest database under studies/ (what `run` wrote last)."""
    candidates = sorted(STUDIES_DIR.glob("*.db"), key=lambda p: p.stat().st_mtime)
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
                f"storage '{url}' holds {len(names)} studies; pick one with --study "
                f"({', '.join(names) or 'none'})"
            )
        study_name = names[0]
    if study_name not in names:
        raise StudyError(
            f"no study '{study_name}' in '{url}'; studies there: {', '.join(names) or 'none'}"
        )
    return optuna.load_study(study_name=study_name, storage=storage)


def artifact_dir(storage_url: str, study_name: str) -> Path:
    """Where a study's artifacts (sample outputs per trial) live: beside its SQLite file."""
    sqlite_file = _sqlite_file(storage_url)
    if sqlite_file is not None:
        return sqlite_file.with_name(f"{sqlite_file.stem}-artifacts")
    return STUDIES_DIR / f"{study_name}-artifacts"
