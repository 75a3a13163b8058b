"""A storage password is never printed: not by run, best, export, report, dashboard or an error,
and not in anything a study stores. Against a real PostgreSQL server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import optuna
import pytest
from postgres_server import available, postgres
from small_space import autotune_cli, small_space

from autotune.study.store.storage_urls import display_url

SECRET = "S3cretPw0rd-do-not-print"
needs_postgres = pytest.mark.skipif(
    not available(), reason="PostgreSQL server binaries are not installed"
)


def everything_under(folder: Path) -> str:
    texts = []
    for path in folder.rglob("*"):
        if path.is_file() and path.stat().st_size < 20_000_000:
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


@pytest.mark.slow
def test_every_query_value_of_a_storage_url_is_masked(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    """Any key may carry a password (`?pw=`, issue 30): every query value is masked, by every
    command that prints the URL and in every error that quotes it."""
    assert display_url(f"postgresql://u@h/db?pw={SECRET}&sslmode=require") == (
        "postgresql://u@h/db?pw=***&sslmode=***"
    )
    assert display_url(f"no url?x={SECRET};y=2") == "no url?x=***;y=***"  # SQLAlchemy fails
    url, name = small_study
    closed = f"postgresql+psycopg://autotune@127.0.0.1:9/autotune?pw={SECRET}"
    commands = [
        ["best", "--study", name, "--storage", f"{url}?timeout=9&pw={SECRET}"],
        ["best", "--study", "nope", "--storage", f"{url}?uri=true&pw={SECRET}"],
        ["best", "--study", name, "--storage", f"sqlite:///{tmp_path}/none.db?key={SECRET}"],
        ["best", "--study", name, "--storage", closed],
        ["best", "--study", name, "--storage", f"{closed}&options={SECRET}x"],
    ]
    with ThreadPoolExecutor(len(commands)) as pool:
        results = list(pool.map(lambda args: autotune_cli(*args, cwd=tmp_path), commands))
    # SQLite takes no `pw` (its driver would ignore it): refused, masked.
    assert [result.returncode for result in results] == [2, 2, 2, 2, 2]
    assert "pw=***" in results[1].stderr and "pw=***" in results[0].stderr
    for result in results:
        assert SECRET not in result.stdout + result.stderr
        assert "Traceback" not in result.stderr
    # Nor in a file name (with uri=true the query once became part of the file's name).
    for folder in (Path(url.removeprefix("sqlite:///")).parent, tmp_path):
        assert not [path for path in folder.rglob("*") if SECRET in path.name]


@pytest.mark.slow
@needs_postgres
def test_no_output_or_stored_attribute_holds_the_password(tmp_path: Path) -> None:
    with postgres() as url:
        storage = url.replace("autotune@", f"autotune:{SECRET}@")  # trust auth ignores it
        space = small_space(tmp_path, trials=2)
        outputs = []

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            result = autotune_cli(*args, cwd=tmp_path)
            outputs.append(result.stdout + result.stderr)
            return result

        def clis(*commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
            """Read-only commands at once (each a process of its own, as cli runs them): most
            of each one's time is its start-up."""
            with ThreadPoolExecutor(len(commands)) as pool:
                return list(pool.map(lambda args: cli(*args), commands))

        run = cli("run", "--space", str(space), "--study", "p", "--storage", storage)
        assert run.returncode == 0, run.stderr[-3000:]
        assert "study stored in postgresql+psycopg://autotune:***@" in run.stderr
        report = tmp_path / "report.html"
        closed = storage.rsplit(":", 1)[0] + ":9/autotune"  # a port nothing listens on
        best, export, reported, missing, unreachable = clis(
            ["best", "--study", "p", "--storage", storage],
            ["export", "--study", "p", "--storage", storage],
            ["report", "--study", "p", "--storage", storage, "--out", str(report)],
            ["best", "--study", "nope", "--storage", storage],
            ["best", "--study", "p", "--storage", closed],
        )
        assert best.returncode == 0
        assert export.returncode == 0
        assert reported.returncode == 0
        assert missing.returncode == 2 and "autotune:***@" in missing.stderr
        assert unreachable.returncode == 2 and "cannot open storage" in unreachable.stderr

        dashboard = subprocess.Popen(
            [sys.executable, "-m", "autotune.cli", "dashboard", "--study", "p",
             "--storage", storage, "--port", "0"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            assert dashboard.stdout is not None
            lines = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                line = dashboard.stdout.readline()
                lines.append(line)
                if "dashboard: http" in line or not line:
                    break
            outputs.append("".join(lines))
            assert any("autotune:***@" in line for line in lines), lines
        finally:
            dashboard.terminate()
            dashboard.wait(timeout=30)

        # The same study, its password in the query string instead (libpq's `password=`).
        query_form = f"{url}?password={SECRET}"
        readers = (["best"], ["export"], ["report", "--out", str(tmp_path / "r2.html")])
        *read, missing = clis(
            *([*command, "--study", "p", "--storage", query_form] for command in readers),
            ["best", "--study", "nope", "--storage", query_form],
        )
        assert [result.returncode for result in read] == [0, 0, 0]
        assert missing.returncode == 2 and "password=***" in missing.stderr
        resumed = cli("run", "--space", str(space), "--study", "p", "--storage", query_form)
        assert resumed.returncode == 0 and "password=***" in resumed.stderr, resumed.stderr

        study = optuna.load_study(study_name="p", storage=storage)
        stored = json.dumps([study.user_attrs, *[t.user_attrs for t in study.trials]], default=str)
    for text in [*outputs, stored, report.read_text(encoding="utf-8"), everything_under(tmp_path)]:
        assert SECRET not in text
