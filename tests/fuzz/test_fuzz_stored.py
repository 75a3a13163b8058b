"""Bad input, round 4: what autotune reads back from its own files.

Study databases whose rows were edited at random, journals torn at every byte of their last
record or carrying a line that is no Optuna record, and spool files of every JSON shape, all
generated from random.Random(SEED) so that a failure repeats. Every case must be read, or
refused, with no exception other than autotune's own one-line errors, within CASE_TIMEOUT_S,
and without writing: a command that only reads leaves the file's bytes as they were, and
recovery never records what is not a measurement.

Hundreds of damaged studies are made cheaply: one database holds a copy of the small study
(tests/study_factory.py) per case, each damaged in its own rows and read through the same
functions the commands call, over one open storage; a sample of separate files goes through
the real CLI in-process (click's CliRunner), with its exit status and its lines checked.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import sqlite3
import string
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from click.testing import CliRunner, Result
from optuna.distributions import CategoricalDistribution, FloatDistribution
from small_space import autotune_cli
from test_fuzz_inputs import CASE_TIMEOUT_S, deadline

from autotune.cli import main
from autotune.cli.base import json_text
from autotune.errors import AutotuneError
from autotune.records.readable import unreadable_line, unreadable_trials
from autotune.report.data import collect
from autotune.report.text import best_json, best_text
from autotune.study.results.exports import export_trial
from autotune.study.store.recovery import Spool, recover, spool_payload
from autotune.study.store.snapshot import read_study
from autotune.study.store.storage import open_storage

SEED = 30
DATABASE_CASES = 160  # damaged studies read in-process, over one storage
CLI_DATABASE_CASES = 20  # damaged files through the real CLI
JOURNAL_LINE_CASES = 240
SPOOL_CASES = 260

optuna.logging.set_verbosity(optuna.logging.ERROR)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def not_json(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


def unexpected(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


# --- random content -----------------------------------------------------------------------


def junk_text(rng: random.Random) -> str:
    alphabet = string.printable + "é€\u2028\x00"
    return "".join(rng.choices(alphabet, k=rng.randint(0, 40)))


def json_value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON value Python's json writes, NaN and infinities included."""
    kind = rng.randrange(10 if depth < 2 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 3, 2**63, -(2**70), 999])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e300, 1.5, math.nan, math.inf, -math.inf, 0.0])
    if kind in (4, 5):
        return rng.choice(["", "x", "999", "sdpa", "transformers", "tensorrt", junk_text(rng)])
    if kind == 6:
        return rng.choice(["1.5", "NaN", "null", "[]", "true"])
    if kind in (7, 8):
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["a", "config", "batch_size", "values", "name", "attributes", junk_text(rng)]
    return {rng.choice(keys): json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def json_text_of(rng: random.Random) -> str:
    """Mostly JSON (as Optuna stores a value), sometimes not JSON at all."""
    if rng.random() < 0.12:
        return rng.choice(["", "{", "{oops", "[1,", "nul", "'x'", "\x00", junk_text(rng)])
    return json.dumps(json_value(rng))


CONFIG_FIELDS = [
    "backend",
    "dtype",
    "batch_size",
    "image_max_side",
    "attn_implementation",
    "max_new_tokens",
    "do_sample",
    "temperature",
    "kv_cache_fraction",
    "tensor_parallel",
    "seed",
    "no_such_knob",
]
TRIAL_KEYS = [
    "config",
    "is_reference",
    "accuracy",
    "constraints",
    "throughput_output_tokens_per_s",
    "e2e_latency_p95_ms",
    "paired_vs_reference",
    "item_scores",
    "schema_version",
    "failure_reason",
    "gpus",
    "environment",
    "duplicate_of",
    "time_s",
    "candidate",
]
STUDY_KEYS = [
    "space",
    "objective_metrics",
    "dummy_weights",
    "schema_version",
    "deploy_target",
    "model",
    "endpoint",
    "image_geometry",
    "adapters",
    "notes",
    "quantized_paths",
    "lost_trial_6",
]
DISTRIBUTIONS = [
    '{"name": "GammaDistribution", "attributes": {}}',
    '{"name": "CategoricalDistribution", "attributes": {"choices": []}}',
    '{"name": "CategoricalDistribution", "attributes": {"choices": "abc"}}',
    '{"name": "FloatDistribution", "attributes": {"low": 5, "high": 1, "log": false, '
    '"step": null}}',
    '{"name": "IntDistribution", "attributes": {"low": 1}}',
    '{"attributes": {}}',
    "[]",
    "not json",
    "",
]


# --- damaged databases --------------------------------------------------------------------

# Each table of a study, with its key column, and the column that ties a row to a study or a
# trial: what a copy of the study shifts.
TABLES: dict[str, dict[str, str]] = {
    "studies": {"study_id": "study"},
    "study_directions": {"study_direction_id": "own", "study_id": "study"},
    "study_user_attributes": {"study_user_attribute_id": "own", "study_id": "study"},
    "study_system_attributes": {"study_system_attribute_id": "own", "study_id": "study"},
    "trials": {"trial_id": "trial", "study_id": "study"},
    "trial_user_attributes": {"trial_user_attribute_id": "own", "trial_id": "trial"},
    "trial_system_attributes": {"trial_system_attribute_id": "own", "trial_id": "trial"},
    "trial_params": {"param_id": "own", "trial_id": "trial"},
    "trial_values": {"trial_value_id": "own", "trial_id": "trial"},
}


def replicate(db: Path, copies: int) -> list[str]:
    """`db` holds its one study `copies` times, named case-0, case-1, ...; the names."""
    with sqlite3.connect(db) as connection:
        trials = connection.execute("SELECT max(trial_id) FROM trials").fetchone()[0]
        for table, shifted in TABLES.items():
            cursor = connection.execute(f"SELECT * FROM {table}")
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
            own = [c for c, kind in shifted.items() if kind == "own"]
            top = max((row[columns.index(own[0])] for row in rows), default=0) if own else 0
            copied = []
            for copy_index in range(1, copies):
                step = {"study": copy_index, "trial": copy_index * trials, "own": copy_index * top}
                for row in rows:
                    values = list(row)
                    for column, kind in shifted.items():
                        values[columns.index(column)] += step[kind]
                    if table == "studies":
                        values[columns.index("study_name")] = f"case-{copy_index}"
                    copied.append(values)
            marks = ",".join("?" * len(columns))
            connection.executemany(f"INSERT INTO {table} VALUES ({marks})", copied)
        connection.execute("UPDATE studies SET study_name = 'case-0' WHERE study_id = 1")
    return [f"case-{index}" for index in range(copies)]


def row_edits(rng: random.Random, connection: sqlite3.Connection, study_id: int) -> list[str]:
    """One to three random edits of the rows of study `study_id`; each as it was done."""
    trial_ids = [
        row[0]
        for row in connection.execute("SELECT trial_id FROM trials WHERE study_id = ?", [study_id])
    ]
    done = []
    for _ in range(rng.randint(1, 3)):
        trial = rng.choice(trial_ids)
        table = rng.choice(
            ["trial_user_attributes"] * 4
            + ["config"] * 3
            + ["trial_values"] * 2
            + ["trial_params"] * 2
            + ["trials", "study_user_attributes", "study_user_attributes", "study_directions"]
            + ["trial_system_attributes"]
        )
        sql, args = _edit(rng, table, trial, study_id)
        if table == "config":
            sql, args = _config_edit(connection, trial, args)
        connection.execute(sql, args)
        done.append(f"{sql} {args}")
    return done


def _edit(rng: random.Random, table: str, trial: int, study: int) -> tuple[str, list[Any]]:
    if table == "config":
        return "", [rng.choice(CONFIG_FIELDS), json_value(rng)]
    if table == "trial_user_attributes":
        key = rng.choice(TRIAL_KEYS)
        if rng.random() < 0.2:
            return "DELETE FROM trial_user_attributes WHERE key = ? AND trial_id = ?", [key, trial]
        return (
            "INSERT OR REPLACE INTO trial_user_attributes (trial_id, key, value_json) "
            "VALUES (?, ?, ?)",
            [trial, key, json_text_of(rng)],
        )
    if table == "trial_values":
        choice = rng.randrange(5)
        if choice == 0:
            return "DELETE FROM trial_values WHERE trial_id = ?", [trial]
        if choice == 1:
            return "UPDATE trial_values SET value = NULL WHERE trial_id = ?", [trial]
        if choice == 2:
            kind = rng.choice(["INF_POS", "INF_NEG", "BOGUS", "FINITE"])
            return "UPDATE trial_values SET value_type = ? WHERE trial_id = ?", [kind, trial]
        if choice == 3:
            objective = rng.choice([-1, 2, 7])
            return "UPDATE OR IGNORE trial_values SET objective = ? WHERE trial_id = ?", [
                objective,
                trial,
            ]
        return (
            "UPDATE trial_values SET value = ? WHERE trial_id = ?",
            [rng.choice([-1.0, 1e300, 0.0, "x"]), trial],
        )
    if table == "trial_params":
        if rng.random() < 0.5:
            return (
                "UPDATE trial_params SET distribution_json = ? WHERE trial_id = ?",
                [rng.choice(DISTRIBUTIONS), trial],
            )
        value = rng.choice([None, 99.0, -1.0, 0.5, 1e300, "x"])
        return "UPDATE trial_params SET param_value = ? WHERE trial_id = ?", [value, trial]
    if table == "trial_system_attributes":
        return (
            "UPDATE trial_system_attributes SET value_json = ? WHERE trial_id = ?",
            [json_text_of(rng), trial],
        )
    if table == "trials":
        column, value = rng.choice(
            [
                ("state", rng.choice(["RUNNING", "WAITING", "FAIL", "PRUNED", "BOGUS"])),
                ("number", rng.choice([0, -1, None, 10**6])),
                ("datetime_start", rng.choice(["not a date", None, "2030-13-45 99:99:99"])),
            ]
        )
        return f"UPDATE trials SET {column} = ? WHERE trial_id = ?", [value, trial]
    if table == "study_directions":
        direction = rng.choice(["MINIMIZE", "MAXIMIZE", "NOT_SET", "BOGUS"])
        if rng.random() < 0.3:
            return "DELETE FROM study_directions WHERE study_id = ? AND objective = 1", [study]
        return "UPDATE study_directions SET direction = ? WHERE study_id = ?", [direction, study]
    key = rng.choice(STUDY_KEYS)
    if rng.random() < 0.2:
        return "DELETE FROM study_user_attributes WHERE key = ? AND study_id = ?", [key, study]
    return (
        "INSERT OR REPLACE INTO study_user_attributes (study_id, key, value_json) VALUES (?, ?, ?)",
        [study, key, json_text_of(rng)],
    )


def _config_edit(
    connection: sqlite3.Connection, trial: int, change: list[Any]
) -> tuple[str, list[Any]]:
    """One field of a trial's stored configuration set to any JSON value (NaN included, which
    SQLite's own JSON functions refuse)."""
    row = connection.execute(
        "SELECT value_json FROM trial_user_attributes WHERE key = 'config' AND trial_id = ?",
        [trial],
    ).fetchone()
    try:
        config = json.loads(row[0]) if row else {}
    except ValueError:
        config = {}
    if not isinstance(config, dict):
        config = {}
    field, value = change
    config[field] = value
    return (
        "INSERT OR REPLACE INTO trial_user_attributes (trial_id, key, value_json) "
        "VALUES (?, 'config', ?)",
        [trial, json.dumps(config)],
    )


def read_like_the_commands(storage: optuna.storages.BaseStorage, name: str) -> list[str]:
    """What best (table and JSON), report's data and export make of the study; the problems
    ([] when each either read it or refused it with one of autotune's errors)."""
    problems = []
    try:
        study = read_study(storage, name)  # what load_study does past finding the name
    except AutotuneError:
        return []
    except Exception as exc:
        return [f"opening: {unexpected(exc)}"]
    reads: list[tuple[str, Callable[[], Any]]] = [
        ("best --json", lambda: json.loads(json_text(best_json(study)), parse_constant=not_json)),
        ("best", lambda: best_text(study)),
        ("report", lambda: collect(study, artifact_store=None)),
        ("export", lambda: export_trial(study, trial_number=None)),
        ("left out", lambda: [unreadable_line(name, t) for t in unreadable_trials(study)]),
    ]
    for what, read in reads:
        try:
            read()
        except AutotuneError as exc:
            if not str(exc).strip():
                problems.append(f"{what}: an empty error")
        except Exception as exc:
            problems.append(f"{what}: {unexpected(exc)}")
    return problems


@pytest.mark.slow
def test_damaged_databases_are_read_or_refused(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "cases.db"
    shutil.copy(small_study[0].removeprefix("sqlite:///"), db)
    names = replicate(db, DATABASE_CASES)
    rng = random.Random(SEED)
    edits = {}
    with sqlite3.connect(db) as connection:
        for index, name in enumerate(names):
            edits[name] = row_edits(rng, connection, study_id=index + 1)
    before = digest(db)
    storage = open_storage(f"sqlite:///{db}", create=False)
    failures = []
    for name in names:
        try:
            with deadline(CASE_TIMEOUT_S):
                problems = read_like_the_commands(storage, name)
        except Exception as exc:  # the deadline, or what escaped the reads
            problems = [unexpected(exc)]
        if problems:
            failures.append(f"{name} after {edits[name]}: {'; '.join(problems)}")
    assert digest(db) == before, "reading wrote to the database"
    assert not failures, f"{len(failures)} of {len(names)} cases failed:\n" + "\n".join(
        failures[:20]
    )


# --- through the CLI ----------------------------------------------------------------------


def judge(result: Result, out: Path | None) -> list[str]:
    """What is wrong with the command's answer ([] when it is right)."""
    problems = []
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        problems.append(f"raised {unexpected(result.exception)}")
    if result.exit_code not in (0, 2):
        problems.append(f"exit status {result.exit_code}")
    if "Traceback" in result.output:
        problems.append("a traceback")
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ") and line[7:].strip()]
    others = [line for line in lines if not line.startswith(("error: ", "note: ", "(using"))]
    if others:
        problems.append(f"stderr lines that are not `error:`/`note:` lines: {others[:2]}")
    if result.exit_code != 0 and not errors:
        problems.append("a refusal without an `error:` line")
    if result.exit_code != 0 and not result.stdout.strip() and len(errors) != 1:
        problems.append(f"a refusal in {len(errors)} lines")
    if result.exit_code == 0 and errors:
        problems.append("`error:` lines with exit status 0")
    if result.stdout.lstrip().startswith("{"):
        try:
            json.loads(result.stdout, parse_constant=not_json)
        except (ValueError, AssertionError) as exc:
            problems.append(f"stdout is not JSON: {exc}")
    if out is not None and out.exists() != ("report written to" in result.stdout):
        problems.append("a report written without saying so, or said and not written")
    return problems


COMMANDS = [["best"], ["best", "--json"], ["export"], ["export", "--json"], ["report"]]


def run_cli(args: list[str], storage: str, folder: Path) -> tuple[Result, Path | None]:
    out = folder / "report.html" if args == ["report"] else None
    extra = ["--out", str(out)] if out is not None else []
    with deadline(CASE_TIMEOUT_S):
        return CliRunner().invoke(main, [*args, "--storage", storage, *extra]), out


@pytest.mark.slow
def test_damaged_database_files_through_the_cli(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    """Separate files, so that an edit can reach the whole database: a study renamed,
    emptied or doubled, a row of another study's."""
    rng = random.Random(SEED + 1)
    failures = []
    for index in range(CLI_DATABASE_CASES):
        folder = tmp_path / f"case-{index}"
        folder.mkdir()
        db = folder / "small.db"
        shutil.copy(small_study[0].removeprefix("sqlite:///"), db)
        with sqlite3.connect(db) as connection:
            done = row_edits(rng, connection, study_id=1)
            if index % 4 == 0:
                name = rng.choice(["", "small", " ", "x" * 600, "small\n", "case"])
                connection.execute("DROP INDEX IF EXISTS ix_studies_study_name")
                connection.execute("INSERT INTO studies VALUES (2, ?)", [name])
                done.append(f"a second study named {name!r}")
        before = digest(db)
        args = COMMANDS[index % len(COMMANDS)]
        result, out = run_cli(args, f"sqlite:///{db}", folder)
        problems = judge(result, out)
        if digest(db) != before:
            problems.append("the database changed")
        if problems:
            failures.append(f"{args} after {done}: {'; '.join(problems)} ({result.stderr[:300]!r})")
    assert not failures, "\n".join(failures)


# --- journals -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def journal_bytes(small_study: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The small study as a journal, ending in a short record (an attribute set last)."""
    path = tmp_path_factory.mktemp("journal") / "small.journal"
    url, name = small_study
    storage = open_storage(str(path), create=True)
    optuna.copy_study(from_study_name=name, from_storage=url, to_storage=storage)
    optuna.load_study(study_name=name, storage=storage).set_user_attr("checked_by", "fuzz")
    return path.read_bytes()


@pytest.mark.slow
def test_a_journal_torn_at_every_byte_of_its_last_record(
    journal_bytes: bytes, tmp_path: Path
) -> None:
    """A reader ignores the torn record and says so, changing nothing; a run cuts it off,
    says so, and the journal takes records again."""
    head, last = journal_bytes[:-1].rsplit(b"\n", 1)
    head += b"\n"
    assert 40 < len(last) < 300
    failures = []
    for cut in range(1, len(last) + 1):
        journal = tmp_path / f"torn-{cut}.journal"
        journal.write_bytes(head + last[:cut])
        torn = journal.read_bytes()
        args = COMMANDS[cut % 4]
        result, _ = run_cli(args, str(journal), tmp_path)
        problems = judge(result, None)
        if result.exit_code != 0 or "was cut off after" not in result.stderr:
            problems.append("the torn record was not ignored and named")
        if journal.read_bytes() != torn:
            problems.append("a reader changed the file")
        try:
            with deadline(CASE_TIMEOUT_S):
                study = optuna.load_study(
                    study_name="small", storage=open_storage(str(journal), create=True)
                )
                study.set_user_attr("resumed", cut)
            if (
                not journal.read_bytes().startswith(head)
                or b'"resumed"' not in journal.read_bytes()
            ):
                problems.append("a run did not cut the torn record off before it wrote")
        except Exception as exc:
            problems.append(f"a run: {unexpected(exc)}")
        if problems:
            failures.append(f"cut after {cut} of {len(last)} bytes: {'; '.join(problems)}")
    assert not failures, "\n".join(failures[:20])


def journal_lines(rng: random.Random, trials: list[dict[str, Any]]) -> Iterator[bytes]:
    """Lines that are no Optuna record: not JSON, JSON of another shape, Optuna's operations
    with fields of the wrong kind, and one of the study's own trials (`trials`, as Optuna
    wrote them) with one part changed, which Optuna's replay takes as a trial."""
    fields = {
        "op_code": [None, -1, 99, "5", 5.5, 0, 1, 4, 5, 6, 7, 8],
        "worker_id": [None, 3, "w"],
        "study_id": [None, "0", -1, 0, 99],
        "trial_id": [None, "1", -1, 1, 2, 10**9],
        "study_name": [None, 3, "small", ""],
        "directions": [None, [9], ["x"], []],
        "state": [None, -1, 99, "COMPLETE", 1, 3],
        "values": [None, ["x"], [math.nan], [1.0], 5],
        "user_attr": [None, {}, {"a": 1, "b": 2}, {"config": {"batch_size": "x"}}, []],
        "param_name": [None, 3, "batch_size"],
        "param_value_internal": [None, "x", 99, 0.5],
        "distribution": [None, *DISTRIBUTIONS],
        "datetime_start": [None, "not a date", 5],
        "datetime_complete": [None, "not a date"],
        "system_attr": [None, {"a": 1}],
        "step": [None, "x"],
        "intermediate_value": [None, "x"],
    }
    while True:
        kind = rng.randrange(7)
        if kind >= 5:
            trial = json.loads(json.dumps(rng.choice(trials)))
            part = rng.choice([*trial, "user_attrs.config", "user_attrs.accuracy"])
            if part.startswith("user_attrs."):
                trial["user_attrs"][part.split(".", 1)[1]] = json_value(rng)
            else:
                trial[part] = json_value(rng)
            yield json.dumps(trial).encode()
        elif kind == 0:
            yield junk_text(rng).replace("\n", " ").encode()
        elif kind == 1:
            yield json.dumps(json_value(rng)).encode()
        else:
            record = {
                name: rng.choice(values)
                for name, values in fields.items()
                if name in ("op_code", "worker_id") or rng.random() < 0.4
            }
            yield json.dumps(record).encode()


def test_journal_lines_that_are_no_optuna_record(journal_bytes: bytes, tmp_path: Path) -> None:
    rng = random.Random(SEED + 2)
    lines = journal_bytes.splitlines(keepends=True)
    trials = [r for line in lines if "user_attrs" in (r := json.loads(line))]
    failures = []
    made = journal_lines(rng, trials)
    for index in range(JOURNAL_LINE_CASES):
        line = next(made)
        at = rng.randint(1, len(lines))
        journal = tmp_path / f"line-{index}.journal"
        journal.write_bytes(b"".join([*lines[:at], line + b"\n", *lines[at:]]))
        edited = journal.read_bytes()
        args = COMMANDS[index % 4]
        result, _ = run_cli(args, str(journal), tmp_path)
        problems = judge(result, None)
        if journal.read_bytes() != edited:
            problems.append("a reader changed the file")
        if problems:
            failures.append(f"{line[:120]!r} as line {at + 1}: {'; '.join(problems)}")
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])


# --- spool files --------------------------------------------------------------------------

SPACE = {
    "x": FloatDistribution(0.0, 1.0),
    "batch_size": CategoricalDistribution([1, 4, 16]),
}


def spool_texts(rng: random.Random, valid: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(what, text) of spool files: any JSON, a measurement with one part changed, not JSON."""
    while True:
        kind = rng.randrange(6)
        if kind == 0:
            value = json_value(rng)
            yield f"the JSON {json.dumps(value)[:60]}", json.dumps(value)
        elif kind == 1:
            text = json.dumps(valid)
            cut = rng.randint(0, len(text) - 1)
            yield f"a measurement cut after {cut} characters", text[:cut]
        elif kind == 5:
            yield "the measurement itself", json.dumps(valid)
        else:
            changed = json.loads(json.dumps(valid))
            part = rng.choice([*changed, "extra", "user_attrs.config", "user_attrs.accuracy"])
            value = json_value(rng)
            if part.startswith("user_attrs."):
                changed["user_attrs"][part.split(".", 1)[1]] = value
            elif rng.random() < 0.15:
                changed.pop(part, None)
                value = "(removed)"
            else:
                changed[part] = value
            yield f"{part} = {json.dumps(value)[:60]}", json.dumps(changed)


def test_spool_files_of_every_shape_never_record_what_is_not_a_measurement(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED + 3)
    url = f"sqlite:///{tmp_path}/s.db"  # names the spool's folders; the study is in memory
    study = optuna.create_study(study_name="s", directions=["maximize", "minimize"])
    spool = Spool(url, "s")
    config = {"backend": "transformers", "batch_size": 4}
    failures = []
    for _ in range(SPOOL_CASES):
        trial = study.ask(SPACE)
        trial.set_user_attr("config", config)  # as the objective does before measuring
        valid = spool_payload(trial, [120.5, 2400.0], {"config": config, "accuracy": 0.9})
        what, text = next(spool_texts(rng, {**valid}))
        path = spool.folders[0] / f"trial-{trial.number}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        count = len(study.get_trials(deepcopy=False))
        try:
            with deadline(CASE_TIMEOUT_S):
                notes = recover(study, spool)
        except Exception as exc:
            failures.append(f"{what}: {unexpected(exc)}")
            continue
        problems = [f"a note of {len(n.splitlines())} lines" for n in notes if "\n" in n]
        added = study.get_trials(deepcopy=False)[count:]
        if added:
            (recorded,) = added
            if recorded.values != [120.5, 2400.0] or recorded.params != trial.params:
                problems.append(f"recorded {recorded.values} {recorded.params}")
            if path.exists():
                problems.append("the recorded file is still there")
        elif any(n.startswith("discarded the spooled results of a trial") for n in notes):
            # A measurement, but not of this study's trial (its start or configuration
            # changed): removed, nothing recorded.
            if path.exists():
                problems.append("the discarded file is still there")
        else:
            if not any(n.startswith(f"discarded the spool file {path}") for n in notes):
                problems.append(f"not recorded, and not said: {notes}")
            if path.exists() or not path.with_name(path.name + ".unreadable").exists():
                problems.append("the file was not set aside")
        if problems:
            failures.append(f"{what}: {'; '.join(problems)}")
        if not study.get_trials(deepcopy=False)[trial.number].state.is_finished():
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])


@pytest.mark.slow
def test_a_real_process_prints_nothing_else(small_study: tuple[str, str], tmp_path: Path) -> None:
    """A spot check in a process of its own, where a warning or a log line of a library would
    show on stderr (the in-process runs above would not see it)."""
    db = tmp_path / "small.db"
    shutil.copy(small_study[0].removeprefix("sqlite:///"), db)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE trial_values SET value = NULL WHERE trial_id = 3")
        connection.execute("UPDATE trial_params SET distribution_json = '[]' WHERE trial_id = 5")
    done = autotune_cli("best", "--storage", f"sqlite:///{db}", cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    errors = done.stderr.splitlines()
    assert len(errors) == 2 and all(line.startswith("error: study 'small'") for line in errors)
    assert "recommended: trial 5" in done.stdout


def test_there_are_at_least_seven_hundred_cases(journal_bytes: bytes) -> None:
    last = journal_bytes[:-1].rsplit(b"\n", 1)[1]
    torn = 2 * len(last)  # each cut: a reader, then a run
    total = DATABASE_CASES + CLI_DATABASE_CASES + torn + JOURNAL_LINE_CASES + SPOOL_CASES
    assert total >= 700, total
