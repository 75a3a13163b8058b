"""A study built once by the real command line on the smoke space (its bundled tiny model),
for tests that tamper with copies of its database (sqlite3) and read them back through the
real command line."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

from small_space import autotune_cli, run_study, small_space

STUDY = "smoke"


def build_cli_study(folder: Path, trials: int = 3) -> tuple[Path, Path]:
    """(the study database, its space file): `autotune run` on a small copy of smoke.yaml."""
    space = small_space(folder)
    result, _ = run_study(space, study=STUDY, cwd=folder, extra=("--trials", str(trials)))
    assert result.returncode == 0, result.stderr
    return folder / f"{STUDY}.db", space


def tampered(db: Path, folder: Path, *statements: str, args: tuple[object, ...] = ()) -> Path:
    """A copy of `db` in `folder` with `statements` run on it (each with `args`)."""
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / db.name
    shutil.copy(db, copy)
    with sqlite3.connect(copy) as connection:
        for statement in statements:
            connection.execute(statement, args)
    return copy


def read_back(command: str, db: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`autotune COMMAND --storage sqlite:///DB` in a process of its own."""
    return autotune_cli(command, *extra, "--storage", f"sqlite:///{db}", cwd=db.parent, timeout=300)


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith("error: ")]
