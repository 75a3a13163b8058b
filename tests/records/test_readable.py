"""Stored studies edited by hand or damaged: every read goes through one layer
(autotune.records.readable), so a trial that cannot be read is named, in one line, and left
out; the rest of the study stays readable, and nothing is exported or verified that the
damaged trial might have beaten.

The studies are real SQLite files (tests/study_factory.py), damaged with sqlite3 as a user's
edit would; the commands run through the real CLI (in-process).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner, Result

from autotune.cli import main

RECOMMENDED = 2  # the small study's recommendation (tests/study_factory.py)
NEXT_BEST = 5  # what is recommended with trial 2 left out
ROW = RECOMMENDED + 1  # its trial_id (Optuna counts rows from 1)


def copy_of(small_study: tuple[str, str], folder: Path) -> tuple[Path, str]:
    source = Path(small_study[0].removeprefix("sqlite:///"))
    target = folder / source.name
    shutil.copy(source, target)
    return target, f"sqlite:///{target}"


def damage(db: Path, *statements: str) -> None:
    with sqlite3.connect(db) as connection:
        for statement in statements:
            connection.execute(statement)


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def error_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def config_edit(trial: int, path: str, value: str) -> str:
    """Set `config.<path>` of trial `trial` to the JSON `value` (trial ids are numbers + 1)."""
    return (
        f"UPDATE trial_user_attributes SET value_json = json_set(value_json, '$.{path}', "
        f"json('{value}')) WHERE key = 'config' AND trial_id = {trial + 1}"
    )


DAMAGES = {
    "wrong type": ([config_edit(RECOMMENDED, "batch_size", '"x"')], "config.batch_size"),
    "unknown key": ([config_edit(RECOMMENDED, "speed", "11")], "config.speed"),
    "unknown backend": ([config_edit(RECOMMENDED, "backend", '"tensorrt"')], "config.backend"),
    "value null": (
        [f"UPDATE trial_values SET value = NULL WHERE trial_id = {RECOMMENDED + 1}"],
        "values: objective 0 is null",
    ),
    "value deleted": (
        [f"DELETE FROM trial_values WHERE trial_id = {RECOMMENDED + 1}"],
        "values: none stored",
    ),
    "unknown distribution": (
        [
            "UPDATE trial_params SET distribution_json = "
            """'{"name": "GammaDistribution", "attributes": {}}' """
            f"WHERE trial_id = {RECOMMENDED + 1} AND param_name = 'batch_size'"
        ],
        "params.batch_size: Unknown distribution class: GammaDistribution",
    ),
    "config missing": (
        [f"DELETE FROM trial_user_attributes WHERE key = 'config' AND trial_id = {ROW}"],
        "config: missing",
    ),
    "version a string": (
        [
            "UPDATE trial_user_attributes SET value_json = '\"999\"' "
            f"WHERE key = 'schema_version' AND trial_id = {RECOMMENDED + 1}"
        ],
        "schema_version: '999' is not a record version",
    ),
    "accuracy NaN": (
        [
            "UPDATE trial_user_attributes SET value_json = 'NaN' "
            f"WHERE key = 'accuracy' AND trial_id = {RECOMMENDED + 1}"
        ],
        "accuracy: Input should be a finite number",
    ),
    "attribute not JSON": (
        [
            "UPDATE trial_user_attributes SET value_json = '{oops' "
            f"WHERE key = 'is_reference' AND trial_id = {RECOMMENDED + 1}"
        ],
        "is_reference (user attribute): not JSON",
    ),
}


def damaged_copy(small_study: tuple[str, str], folder: Path, case: str) -> tuple[Path, str, str]:
    """A copy of the small study with DAMAGES[case] done to it: (file, URL, field named)."""
    statements, field = DAMAGES[case]
    db, url = copy_of(small_study, folder)
    damage(db, *statements)
    return db, url, field


@pytest.mark.slow
@pytest.mark.parametrize("case", list(DAMAGES))
def test_a_damaged_trial_is_named_and_left_out_and_the_rest_stays_readable(
    small_study: tuple[str, str], tmp_path: Path, case: str
) -> None:
    db, url, field = damaged_copy(small_study, tmp_path, case)
    before = db.read_bytes()

    best = cli("best", "--storage", url)
    assert best.exit_code == 2, best.output
    (line,) = error_lines(best)
    assert f"study 'small', trial {RECOMMENDED} (complete) cannot be read" in line
    assert field in line and "left out" in line
    assert f"recommended: trial {NEXT_BEST}" in best.stdout  # the rest is still ranked
    assert "batch_size=None" not in best.stdout

    as_json = cli("best", "--storage", url, "--json")
    assert as_json.exit_code == 2
    document = json.loads(as_json.stdout)
    assert document["recommended"]["trial"] == NEXT_BEST
    assert field in document["unreadable"][str(RECOMMENDED)]

    # The damaged trial may have been the best: nothing is exported in its stead.
    refused = cli("export", "--storage", url)
    assert refused.exit_code == 2, refused.output
    (line,) = error_lines(refused)
    assert f"trial {RECOMMENDED} (complete) cannot be read" in line and field in line
    assert "--trial N" in line and "swift deploy" not in refused.stdout
    chosen = cli("export", "--storage", url, "--trial", str(RECOMMENDED))
    assert chosen.exit_code == 2 and field in error_lines(chosen)[0]
    other = cli("export", "--storage", url, "--trial", str(NEXT_BEST))
    assert other.exit_code == 0, other.output
    assert "--max_batch_size 4" in other.stdout
    assert db.read_bytes() == before  # reading repairs nothing behind the user's back


@pytest.mark.slow
@pytest.mark.parametrize("case", ["wrong type", "value null", "unknown distribution"])
def test_report_and_verify_of_a_study_with_a_damaged_trial(
    small_study: tuple[str, str], tmp_path: Path, case: str
) -> None:
    _, url, field = damaged_copy(small_study, tmp_path, case)
    out = tmp_path / "report.html"
    report = cli("report", "--storage", url, "--out", str(out))
    assert report.exit_code == 2, report.output
    (line,) = error_lines(report)
    assert f"trial {RECOMMENDED} (complete) cannot be read" in line and field in line
    assert "its stored record cannot be read" in out.read_text(encoding="utf-8")
    verify = cli("verify", "--storage", url, "--format", "swift")
    assert verify.exit_code == 2, verify.output
    (line,) = error_lines(verify)
    assert f"trial {RECOMMENDED} (complete) cannot be read" in line and "--trial N" in line


def test_two_studies_of_one_name_are_one_line(small_study: tuple[str, str], tmp_path: Path) -> None:
    db, url = copy_of(small_study, tmp_path)
    damage(
        db,
        "DROP INDEX ix_studies_study_name",
        "INSERT INTO studies (study_id, study_name) VALUES (2, 'small')",
    )
    for command in (["best"], ["export"], ["report", "--out", str(tmp_path / "r.html")]):
        result = cli(*command, "--storage", url, "--study", "small")
        assert result.exit_code == 2
        assert error_lines(result) == [
            f"error: storage '{url}' holds 2 studies named 'small' (the database was edited): "
            "rename or delete all but one"
        ]
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("version", ['"999"', "999.0", "0", "true", "999"])
def test_a_study_record_version_must_be_a_known_whole_number(
    small_study: tuple[str, str], tmp_path: Path, version: str
) -> None:
    db, url = copy_of(small_study, tmp_path)
    damage(
        db,
        f"UPDATE study_user_attributes SET value_json = '{version}' WHERE key = 'schema_version'",
    )
    result = cli("best", "--storage", url)
    assert result.exit_code == 2
    (line,) = error_lines(result)
    assert "schema_version" in line or "newer autotune" in line
    assert "study 'small'" in line


def test_json_output_never_carries_nan_or_infinity(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    db, url = copy_of(small_study, tmp_path)
    damage(
        db,
        "UPDATE trial_user_attributes SET value_json = 'NaN' WHERE "
        f"key = 'tpot_p50_ms' AND trial_id = {RECOMMENDED + 1}",
        f"UPDATE trial_user_attributes SET value_json = 'NaN' WHERE key = 'ttft_p50_ms' "
        f"AND trial_id = {RECOMMENDED + 1}",
    )
    result = cli("best", "--storage", url, "--json")
    assert result.exit_code == 0, result.output

    def not_json(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    document = json.loads(result.stdout, parse_constant=not_json)
    figures = document["recommended"]["figures"]
    # Unknown (NaN) latencies are null; an infinite or negative throughput is no figure at all
    # (tests/records/test_checks.py).
    assert figures["tpot_p50_ms"] is None and figures["ttft_p50_ms"] is None
    assert document["null_because"]["recommended.figures.ttft_p50_ms"] == (
        "not a finite number (nan)"
    )
    exported = cli("export", "--storage", url, "--json")
    json.loads(exported.stdout, parse_constant=not_json)


def test_a_journal_study_reads_through_the_same_layer(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    from autotune.study.store.storage import open_storage

    url, name = small_study
    journal = tmp_path / "small.journal"
    optuna.copy_study(
        from_study_name=name, from_storage=url, to_storage=open_storage(str(journal), create=True)
    )
    # copy_study writes each trial whole, in one record; the trials are made in order.
    records = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]
    trials = [r for r in records if "user_attrs" in r and "config" in r["user_attrs"]]
    trials[RECOMMENDED]["user_attrs"]["config"]["batch_size"] = "x"
    edited = [json.dumps(record) for record in records]
    journal.write_text("\n".join(edited) + "\n", encoding="utf-8")
    best = cli("best", "--storage", str(journal))
    assert best.exit_code == 2
    assert f"recommended: trial {NEXT_BEST}" in best.stdout
    (line,) = error_lines(best)
    assert f"trial {RECOMMENDED} (complete) cannot be read: config.batch_size" in line
