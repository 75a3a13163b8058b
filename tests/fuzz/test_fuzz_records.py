"""Bad input, round 6: records that are too deep, out of range, forged or impossible, and
environment variables of any value.

A study built once by the real command line on the smoke space (tests/cli_study.py) is
copied RECORD_CASES times into one database (test_fuzz_stored.replicate), each copy given one
to three edits drawn from random.Random(SEED): an attribute nested past the depth limit, a
registered figure set out of its range (negative, huge, infinite, NaN where a number is
measured), a figure forged away from the objective value Optuna ranks by, a second reference,
a failure_kind on a completed trial. Every copy must be read by the commands' own functions
(best, best --json, report's data, export) or refused in one of autotune's lines, and the
oracle holds: every trial an edit made impossible is a stand-in, and no figure out of range is
ever recommended. ENV_CASES values go through each AUTOTUNE_* variable: a value inside its
declared range is taken, anything else refused in one line naming it.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import optuna
import pytest
from cli_study import build_cli_study
from test_fuzz_inputs import CASE_TIMEOUT_S, deadline
from test_fuzz_stored import junk_text, read_like_the_commands, replicate, unexpected

from autotune import variables
from autotune.errors import VariableError
from autotune.measure.registry import METRICS, THROUGHPUT
from autotune.records.readable import is_stand_in
from autotune.report.text import best_json
from autotune.study.store.snapshot import read_study
from autotune.study.store.storage import open_storage

SEED = 60
# Added to the number of a trial made a second reference: impossible while trial 0, the
# study's reference, still reads as one (a damaged reference leaves the claim the only one).
SECOND = 1000
RECORD_CASES = 160
ENV_CASES = 120

optuna.logging.set_verbosity(optuna.logging.ERROR)


@pytest.fixture(scope="module")
def cli_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cli_study(tmp_path_factory.mktemp("cli-study"))[0]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _set_attr(trial_id: int, key: str, value_json: str) -> tuple[str, list[Any]]:
    return (
        "INSERT OR REPLACE INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, ?, ?)",
        [trial_id, key, value_json],
    )


OUT_OF_RANGE = ["-1", "-5.0", "-1e308", "1e308", "Infinity", "-Infinity", "1e12", "NaN"]


def record_edit(
    rng: random.Random, trial_ids: list[int], study_id: int
) -> tuple[str, list[Any], int | None]:
    """(sql, args, the trial number the edit makes impossible, or None when it may not)."""
    trial = rng.choice(trial_ids)
    number = trial_ids.index(trial)
    kind = rng.randrange(6)
    if kind == 0:  # too deep, in a trial's attribute or the study's
        depth = rng.choice([33, 200, 900, 5_000, 100_000])
        if rng.random() < 0.2:
            return (
                "INSERT OR REPLACE INTO study_user_attributes (study_id, key, value_json) "
                "VALUES (?, 'notes', ?)",
                [study_id, nested(depth)],
                None,  # the whole study is refused, in one line
            )
        key = rng.choice(["note", "environment", "gpus", "config", "item_scores"])
        return (*_set_attr(trial, key, nested(depth)), number)
    if kind == 1:  # a registered figure out of its range
        name = rng.choice(sorted(METRICS))
        value = rng.choice(OUT_OF_RANGE)
        # NaN is "not measured" where the registry says so: then it is no impossibility.
        harmless = value == "NaN" and METRICS[name].may_be_unknown
        if name == "accuracy":
            harmless = False  # a NaN accuracy is unreadable: a stand-in too
        return (*_set_attr(trial, name, value), None if harmless else number)
    if kind == 2:  # the record's throughput forged away from the value Optuna ranks by
        forged = rng.choice(["100000.0", "1.5", "999999.0", "2.5e5"])
        return (*_set_attr(trial, THROUGHPUT, forged), number)
    if kind == 3:  # Optuna's value forged away from the record
        value = rng.choice([100000.0, 0.001, 12345.6])
        return (
            "UPDATE trial_values SET value = ? WHERE trial_id = ? AND objective = 0",
            [value, trial],
            number,
        )
    if kind == 4:  # a failure on a completed trial
        failure = rng.choice(['"oom"', '"crash"', '"no-tokens"', '"x"'])
        return (*_set_attr(trial, "failure_kind", failure), number)
    # a second reference: any completed trial after the first claims to be it (impossible
    # while the first reads as the reference: SECOND marks it)
    later = [t for t in trial_ids if t != trial_ids[0]]
    chosen = rng.choice(later)
    return (*_set_attr(chosen, "is_reference", "true"), SECOND + trial_ids.index(chosen))


@pytest.mark.slow
def test_impossible_records_are_stand_ins_and_never_recommended(
    cli_study: Path, tmp_path: Path
) -> None:
    db = tmp_path / "cases.db"
    shutil.copy(cli_study, db)
    names = replicate(db, RECORD_CASES)
    rng = random.Random(SEED)
    edits: dict[str, list[str]] = {}
    impossible: dict[str, set[int]] = {}
    with sqlite3.connect(db) as connection:
        per_study = connection.execute("SELECT count(*) FROM trials WHERE study_id = 1").fetchone()[
            0
        ]
        for index, name in enumerate(names):
            trial_ids = [index * per_study + 1 + t for t in range(per_study)]
            edits[name], impossible[name] = [], set()
            for _ in range(rng.randint(1, 3)):
                sql, args, number = record_edit(rng, trial_ids, study_id=index + 1)
                connection.execute(sql, args)
                shown = [
                    a if not isinstance(a, str) or len(a) < 60 else f"{a[:20]}..." for a in args
                ]
                edits[name].append(f"{sql.split(' (')[0]} {shown}")
                if number is not None:
                    impossible[name].add(number)
    storage = open_storage(f"sqlite:///{db}", create=False)
    failures = []
    for name in names:
        try:
            with deadline(CASE_TIMEOUT_S):
                problems = read_like_the_commands(storage, name)
                problems += _oracle(storage, name, impossible[name])
        except Exception as exc:
            problems = [unexpected(exc)]
        if problems:
            failures.append(f"{name} after {edits[name]}: {'; '.join(problems)}")
    assert not failures, f"{len(failures)} of {len(names)} cases failed:\n" + "\n".join(
        failures[:20]
    )


def _oracle(storage: optuna.storages.BaseStorage, name: str, impossible: set[int]) -> list[str]:
    """What the readers got wrong: an impossible trial read as a trial, a figure out of range
    recommended."""
    try:
        study = read_study(storage, name)
        trials = study.get_trials(deepcopy=False)
    except (
        Exception
    ):  # refused whole (a study attribute too deep): read_like_the_commands judged it
        return []
    if trials and not is_stand_in(trials[0]):
        impossible = {n % SECOND for n in impossible}
    else:
        impossible = {n for n in impossible if n < SECOND}
    problems = [
        f"trial {t.number} was read as a trial"
        for t in trials
        if t.number in impossible and not is_stand_in(t)
    ]
    try:
        recommended = best_json(study).get("recommended") or {}
    except Exception:  # autotune's refusal (nothing to recommend): judged above
        return problems
    figures = recommended.get("figures") or {}
    for metric, spec in METRICS.items():
        value = figures.get(metric)
        if (
            isinstance(value, int | float)
            and not (math.isnan(value) and spec.may_be_unknown)
            and not 0 <= value <= spec.high
        ):
            problems.append(f"recommended with {metric} {value}")
    return problems


# --- environment variables ----------------------------------------------------------------

# Each numeric variable's declared range, as the oracle knows it from the README's table.
RANGES = {
    "AUTOTUNE_SQLITE_BUSY_TIMEOUT_S": (0.1, 86_400.0, float),
    "AUTOTUNE_HEARTBEAT_GRACE_S": (2, 86_400, int),
    "AUTOTUNE_ENGINES_AT_ONCE": (1, 1024, int),
    "AUTOTUNE_GUARD_PARENT": (1, 2**31 - 1, int),
}
GARBAGE = ["abc", "nan", "NaN", "inf", "-inf", "1e-9", "-5", "²", "٣", "0x10", "30s", "1 2",
           "1e400", "--", "None", "true"]  # fmt: skip


def env_case(rng: random.Random) -> tuple[str, str, bool]:
    """(variable, value, whether the value lies in its declared range)."""
    name = rng.choice(sorted(RANGES))
    low, high, kind = RANGES[name]
    choice = rng.randrange(4)
    if choice == 0:  # inside the range
        value = rng.uniform(low, high) if kind is float else rng.randint(int(low), int(high))
        text = f"{value:.6g}" if kind is float else str(value)
        return name, rng.choice(["", " "]) + text, True
    if choice == 1:  # just outside it, or far
        value = rng.choice([low - 1, high + 1, -high, high * 10, 0 if low > 0 else -1])
        return name, f"{value:g}" if kind is float else str(int(value)), False
    if choice == 2:
        return name, rng.choice(GARBAGE), False
    return name, junk_text(rng).replace("\x00", "").strip() or "x", False


def test_every_variable_takes_its_range_and_refuses_the_rest_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(SEED + 1)
    failures = []
    for _ in range(ENV_CASES):
        name, value, good = env_case(rng)
        low, high, kind = RANGES[name]
        monkeypatch.setenv(name, value)
        try:
            got = variables.read(name)
            if not good:
                failures.append(f"{name}={value!r}: taken as {got!r}")
            elif not isinstance(got, kind) or not low <= got <= high:
                failures.append(f"{name}={value!r}: read as {got!r}")
        except VariableError as exc:
            message = str(exc)
            if good:
                failures.append(f"{name}={value!r}: refused: {message}")
            elif "\n" in message or not message.startswith(f"{name}={value[:60]!r} is refused"):
                failures.append(f"{name}={value!r}: {message!r}")
        except Exception as exc:
            failures.append(f"{name}={value!r}: {unexpected(exc)}")
        finally:
            monkeypatch.delenv(name)
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])


def test_there_are_at_least_two_hundred_new_cases() -> None:
    assert RECORD_CASES + ENV_CASES >= 200
    assert json.dumps(sorted(RANGES))  # each range named, as in the README's table
    assert set(RANGES) <= set(variables.VARIABLES)
