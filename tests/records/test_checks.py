"""Records that cannot be true are named in one line and left out, never printed as fact
(autotune.records.checks); a study built by the real command line, copies tampered with."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from cli_study import build_cli_study, error_lines, read_back, tampered

from autotune.measure.registry import METRICS
from autotune.records.checks import figure_problem, second_references

THROUGHPUT = "throughput_output_tokens_per_s"


def test_every_figure_has_a_range_and_unknown_is_only_where_it_means_not_measured() -> None:
    assert figure_problem({THROUGHPUT: 120.0, "tpot_p50_ms": math.nan}) is None
    assert figure_problem({"peak_memory_mib": math.nan, "startup_s": math.nan}) is None
    assert (
        figure_problem({THROUGHPUT: math.nan})
        == f"{THROUGHPUT}: NaN, where a measured figure is a number"
    )
    assert figure_problem({THROUGHPUT: -5.0}) == f"{THROUGHPUT}: -5 lies outside 0 to 1e+09"
    for name, spec in METRICS.items():
        assert figure_problem({name: -1}) is not None, name
        assert figure_problem({name: math.inf}) is not None, name
        assert figure_problem({name: spec.high}) is None, name


def test_one_reference_per_machine_a_second_on_the_same_one_is_impossible() -> None:
    """A study resumed with --allow-other-machine measures its reference again on the new
    machine (its comparison group's own); a second one on the same machine is forged."""

    def reference(group: str) -> optuna.trial.FrozenTrial:
        machine = {"group": group, "gpu": group, "cpu": "x86_64"}
        return optuna.trial.create_trial(
            values=[1.0], user_attrs={"is_reference": True, "machine": machine}
        )

    trials = [reference("h100"), reference("h200"), reference("h200"), reference("h100")]
    for number, trial in enumerate(trials):
        trial.number = number
    assert second_references(trials) == {
        2: "is_reference: a second reference (trial 1 is the first)",
        3: "is_reference: a second reference (trial 0 is the first)",
    }


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cli_study(tmp_path_factory.mktemp("cli-study"))[0]


def attr(trial_id: int, key: str, value_json: str) -> str:
    return (
        "INSERT OR REPLACE INTO trial_user_attributes (trial_id, key, value_json) "
        f"VALUES ({trial_id}, '{key}', '{value_json}')"
    )


# (case, statements, the trial named, what its line says). Trial ids are numbers + 1.
CASES = [
    ("negative", [attr(2, THROUGHPUT, "-5.0")], 1, f"{THROUGHPUT}: -5 lies outside 0 to 1e+09"),
    ("huge", [attr(2, THROUGHPUT, "1e308")], 1, f"{THROUGHPUT}: 1e+308 lies outside"),
    ("latency", [attr(2, "e2e_latency_p95_ms", "-1")], 1, "e2e_latency_p95_ms: -1 lies outside"),
    ("memory", [attr(2, "peak_memory_mib", "Infinity")], 1, "peak_memory_mib: inf lies outside"),
    (
        "forged",
        [attr(1, THROUGHPUT, "100000.0")],
        0,
        f"objective 0 ({THROUGHPUT}) is stored as",
    ),
    ("two references", [attr(2, "is_reference", "true")], 1, "a second reference (trial 0"),
    ("oom", [attr(2, "failure_kind", '"oom"')], 1, "failure_kind 'oom' on a completed trial"),
    (
        "zero",
        [
            attr(2, THROUGHPUT, "0.0"),
            "UPDATE trial_values SET value = 0.0 WHERE trial_id = 2 AND objective = 0",
        ],
        1,
        f"{THROUGHPUT}: 0.0 on a completed trial",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("case", "statements", "number", "says"), CASES, ids=[c[0] for c in CASES])
def test_an_impossible_record_is_one_line_and_left_out(
    study: Path, tmp_path: Path, case: str, statements: list[str], number: int, says: str
) -> None:
    db = tampered(study, tmp_path, *statements)
    done = read_back("best", db)
    assert done.returncode == 2, done.stderr
    (line,) = error_lines(done)
    assert line.startswith(
        f"error: study 'smoke', trial {number}'s record (complete) is impossible: "
    )
    assert says in line and line.endswith("; it is left out: repair or delete it"), line
    # Left out of the ranking: never recommended, its figure never printed as measured.
    assert f"recommended: trial {number} " not in done.stdout
    # (its line, which stdout may repeat among the trials left out, is no figure.)
    assert "-5.0 tok/s" not in done.stdout and "100000.0" not in done.stdout
    assert "0" * 30 not in done.stdout
    as_json = read_back("best", db, "--json")
    assert as_json.returncode == 2 and str(number) in as_json.stdout.split('"unreadable"')[1]
