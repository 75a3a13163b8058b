"""Files autotune writes: `--out` and study storages are regular files, on disk, of autotune's.

A report is renamed over its target, which replaced /dev/full as root (issue 30); an
in-memory SQLite URI stored a study nowhere; another program's database with its own
`trials` table got Optuna's tables and a study row before the error. Each is now one line and
a non-zero exit, with nothing written.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from small_space import small_space

from autotune.cli import main
from autotune.study.store.storage_urls import not_optunas, optuna_columns, sqlite_file


def one_error(result: Result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit), result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def report(url: str, out: Path | str) -> Result:
    return CliRunner().invoke(main, ["report", "--storage", url, "--out", str(out)])


# --- --out ------------------------------------------------------------------------------


def test_report_out_refuses_devices_fifos_sockets_and_folders(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = small_study
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    to_device = tmp_path / "to-full"
    to_device.symlink_to("/dev/full")
    regular = "not a regular file"
    cases = {
        "/dev/full": ("a device", regular),  # as root too: a rename would replace the device
        "/dev/null": ("a device", regular),
        str(fifo): ("a FIFO", regular),
        str(to_device): ("a device", regular),  # through a symlink
        str(tmp_path): ("is a directory",),  # click's own check
    }
    before = {path: os.lstat(path) for path in ("/dev/full", "/dev/null", fifo, to_device)}
    for out, needles in cases.items():
        one_error(report(url, out), out, *needles)
    for path, info in before.items():
        now = os.lstat(path)
        assert (now.st_mode, now.st_ino, now.st_rdev) == (info.st_mode, info.st_ino, info.st_rdev)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "to-full"]  # no temp file


def test_report_out_through_a_symlink_replaces_its_regular_target(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = small_study
    target = tmp_path / "reports" / "latest.html"
    target.parent.mkdir()
    target.write_text("old", "utf-8")
    link = tmp_path / "report.html"
    link.symlink_to(target)
    result = report(url, link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and target.read_text("utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in target.parent.iterdir()) == ["latest.html"]


# --- in-memory SQLite -------------------------------------------------------------------


IN_MEMORY = [
    "sqlite://",
    "sqlite:///:memory:",
    "sqlite:///file:qa.db?mode=memory&cache=shared&uri=true",
    "sqlite:///file:qa.db?mode=MEMORY&uri=TRUE",
    "sqlite:///file:qa.db?vfs=memdb&uri=1",
    "sqlite:///file::memory:?uri=true",
    "sqlite+pysqlite:///file:qa.db?mode=memory&uri=yes",
]


@pytest.mark.parametrize("url", IN_MEMORY)
def test_in_memory_sqlite_is_refused_by_run_and_readers(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = small_space(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    runner = CliRunner()
    result = runner.invoke(main, ["run", "--space", str(space), "--trials", "1", "--storage", url])
    one_error(result, "in-memory SQLite database")
    assert "study stored" not in result.output
    one_error(runner.invoke(main, ["best", "--storage", url, "--study", "s"]), "in-memory")
    assert list(work.iterdir()) == []  # no qa.db, no studies/


def test_a_sqlite_uri_names_its_file(small_study: tuple[str, str], tmp_path: Path) -> None:
    url, name = small_study
    database = Path(url.removeprefix("sqlite:///"))
    assert sqlite_file(f"sqlite:///file:{database}?uri=true&mode=rw") == database
    assert sqlite_file(f"sqlite:///file://localhost{database}?uri=true") == database
    assert sqlite_file("sqlite:///s.db?timeout=5") == Path("s.db")
    assert sqlite_file("postgresql://u@h/db") is None
    result = CliRunner().invoke(
        main, ["best", "--storage", f"sqlite:///file:{database}?uri=true", "--study", name]
    )
    assert result.exit_code == 0, result.output
    missing = tmp_path / "none.db"
    one_error(
        CliRunner().invoke(main, ["best", "--storage", f"sqlite:///file:{missing}?uri=true"]),
        "no study database",
    )
    assert not missing.exists()


# --- another program's database ---------------------------------------------------------


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "schema",
    [
        [
            "CREATE TABLE trials (id INTEGER PRIMARY KEY, name TEXT)",
            "INSERT INTO trials VALUES (1, 'x')",
        ],
        ["CREATE TABLE trials (id INTEGER PRIMARY KEY, name TEXT)"],  # empty: once deleted
        ["CREATE TABLE studies (study_id INTEGER, study_name TEXT)", "CREATE VIEW v AS SELECT 1"],
        ["CREATE TABLE orders (id INTEGER)"],
    ],
    ids=["own-trials-table", "empty-trials-table", "a-view", "another-name"],
)
def test_another_programs_database_is_refused_before_anything_is_written(
    schema: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "theirs.db"
    with sqlite3.connect(database) as db:
        for statement in schema:
            db.execute(statement)
    db.close()
    before = digest(database)
    space = small_space(tmp_path)
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{database}"
    line = one_error(
        CliRunner().invoke(main, ["run", "--space", str(space), "--trials", "1", "--storage", url]),
        str(database),
        "another program's database",
        "nothing was written",
    )
    assert "trials (not Optuna's columns)" in line or "orders" in line or " v" in line, line
    assert database.exists() and digest(database) == before
    with sqlite3.connect(database) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert tables <= {"trials", "studies", "v", "orders"}, tables


def test_the_schema_check_follows_optunas_own_tables() -> None:
    columns = optuna_columns()
    assert len(columns) == 13 and "trial_values" in columns  # 12 of Optuna's + alembic's
    assert not_optunas({name: list(cols) for name, cols in columns.items()}) == []
    assert not_optunas({"trials": ["id"], "sqlite_sequence": ["name"], "x": []}) == [
        "trials (not Optuna's columns)",
        "x",
    ]
