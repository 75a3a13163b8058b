"""JSON too deep or too large in a study's records: refused by name (which trial or study,
which attribute), never a RecursionError (autotune.records.shape)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_study import build_cli_study, error_lines, read_back, tampered
from small_space import autotune_cli

from autotune.records.shape import MAX_DEPTH, MAX_TEXT_CHARS, text_problem, value_problem
from autotune.records.stored import TrialRecord


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_text_depth_counts_brackets_outside_strings() -> None:
    assert text_problem(nested(MAX_DEPTH)) is None
    assert text_problem(json.dumps({"a": "[[[[" * 100})) is None  # inside a string: no depth
    assert text_problem(nested(MAX_DEPTH + 1)) == (
        f"nested {MAX_DEPTH + 1} levels deep, past the {MAX_DEPTH} a stored attribute may hold"
    )
    assert "100,000 levels deep" in str(text_problem(nested(100_000)))


def test_huge_text_is_refused_before_it_is_read() -> None:
    problem = text_problem('"' + "x" * MAX_TEXT_CHARS + '"')
    assert problem is not None and "MiB of JSON" in problem


def test_a_parsed_value_too_deep_is_refused_without_recursion() -> None:
    value: list[object] = []
    for _ in range(50_000):  # far past the interpreter's recursion limit
        value = [value]
    assert value_problem(value) is not None
    assert value_problem({"gpus": [{"index": 0}]}) is None
    problem = TrialRecord.problem({"note": value})
    assert problem is not None and problem.startswith("note: nested more than")


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_cli_study(tmp_path_factory.mktemp("cli-study"))


DEEP = (
    "INSERT OR REPLACE INTO trial_user_attributes (trial_id, key, value_json) VALUES (2, 'note', ?)"
)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["best", "export"])
def test_a_deep_trial_attribute_is_named_and_left_out(
    study: tuple[Path, Path], tmp_path: Path, command: str
) -> None:
    db = tampered(study[0], tmp_path, DEEP, args=(nested(100_000),))
    done = read_back(command, db)
    assert done.returncode == 2
    (line,) = error_lines(done)
    assert "trial 1 (complete) cannot be read: note (user attribute): nested 100,000" in line


@pytest.mark.slow
def test_a_deep_study_attribute_is_one_line(study: tuple[Path, Path], tmp_path: Path) -> None:
    statement = (
        "INSERT OR REPLACE INTO study_user_attributes (study_id, key, value_json) "
        "VALUES (1, 'notes', ?)"
    )
    db = tampered(study[0], tmp_path, statement, args=(nested(100_000),))
    done = read_back("best", db)
    assert done.returncode == 2
    assert error_lines(done) == [
        f"error: cannot read the storage 'sqlite:///{db}': study 'smoke': notes (study "
        "attribute): nested 100,000 levels deep, past the 32 a stored attribute may hold; the "
        "database was edited or damaged: repair or delete that attribute"
    ]


@pytest.mark.slow
def test_a_resumed_run_goes_on_around_a_deep_attribute(
    study: tuple[Path, Path], tmp_path: Path
) -> None:
    db = tampered(study[0], tmp_path, DEEP, args=(nested(100_000),))
    done = autotune_cli(
        "run", "--space", str(study[1]), "--study", "smoke", "--storage", f"sqlite:///{db}",
        "--trials", "4", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr, done.stderr
    assert done.returncode in (0, 2), done.stderr
    assert "nested 100,000 levels deep" in done.stderr + done.stdout
