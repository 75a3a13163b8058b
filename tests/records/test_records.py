"""The contracts at the bottom (autotune.records): what one layer hands the next."""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest
from cli_study import build_cli_study, tampered
from pydantic import ValidationError
from small_space import autotune_cli

from autotune import SCHEMA_VERSION
from autotune.errors import StudyError
from autotune.measure.timing import RequestTiming
from autotune.records import SessionResult
from autotune.records.stored import StudyRecord, TrialRecord


def result(**changed: object) -> SessionResult:
    values: dict[str, object] = {
        "load_start": 10.0,
        "load_stop": 20.0,
        "timings": [RequestTiming(10.0, 10.2, 10.9, 11.0, 8, 4, (10.2, 10.4, 10.6, 10.9))],
        "peak_memory_mib": 512.0,
        "memory_source": "rss",
        "environment": {"runner": "inprocess"},
    }
    return SessionResult(**{**values, **changed})


def test_a_session_result_crosses_the_worker_pipe_unchanged() -> None:
    """The worker sends its result as JSON lines; the parent reads back the same result, a
    NaN figure (memory unknown) included."""
    sent = result(peak_memory_mib=math.nan, predictions={"a": "text"}, stop_reason="converged")
    received = SessionResult.model_validate(json.loads(json.dumps(sent.model_dump())))
    assert math.isnan(received.peak_memory_mib)
    assert received.model_dump(exclude={"peak_memory_mib"}) == sent.model_dump(
        exclude={"peak_memory_mib"}
    )
    assert received.timings[0].chunk_times == (10.2, 10.4, 10.6, 10.9)


def test_a_misspelt_or_missing_field_fails_where_the_result_is_made() -> None:
    with pytest.raises(ValidationError, match="stop_reasn"):
        result(stop_reasn="converged")
    with pytest.raises(ValidationError, match="memory_source"):
        SessionResult(
            load_start=0.0, load_stop=1.0, timings=[], peak_memory_mib=1.0, environment={}
        )


def copied_study(small_study: tuple[str, str], folder: Path) -> tuple[str, optuna.Study]:
    """A private copy of the shared finished study, to change its records."""
    url, name = small_study
    storage = f"sqlite:///{folder}/copy.db"
    optuna.copy_study(from_study_name=name, from_storage=url, to_storage=storage)
    return storage, optuna.load_study(study_name=name, storage=storage)


def test_stored_records_read_back_typed(small_study: tuple[str, str]) -> None:
    study = optuna.load_study(study_name=small_study[1], storage=small_study[0])
    reference = next(t for t in study.trials if t.user_attrs.get("is_reference"))
    record = TrialRecord.of(reference)
    assert record.is_reference is True and record.trial_config().backend
    assert (
        record.figure("throughput_output_tokens_per_s")
        == (reference.user_attrs["throughput_output_tokens_per_s"])
    )
    assert record.figure("no_such_metric") is None
    assert StudyRecord.of(study).objective_metrics == study.user_attrs["objective_metrics"]


@pytest.mark.slow
def test_a_record_without_a_version_is_version_1_and_a_newer_one_is_one_line(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    storage, study = copied_study(small_study, tmp_path)
    trial = study.trials[0]
    attrs = {k: v for k, v in trial.user_attrs.items() if k != "schema_version"}
    assert TrialRecord.from_attrs(attrs, number=0).schema_version == 1
    study.set_user_attr("schema_version", SCHEMA_VERSION + 1)
    shown = autotune_cli("best", "--study", study.study_name, "--storage", storage, cwd=tmp_path)
    assert shown.returncode != 0 and "Traceback" not in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1, shown.stderr
    assert "stored by a newer autotune" in shown.stderr and "upgrade autotune" in shown.stderr


def test_a_mistyped_record_names_its_key(small_study: tuple[str, str]) -> None:
    trial = optuna.load_study(study_name=small_study[1], storage=small_study[0]).trials[0]
    broken = {**trial.user_attrs, "is_reference": "maybe"}
    with pytest.raises(StudyError, match=r"trial 0 has an unreadable record: is_reference"):
        TrialRecord.from_attrs(broken, number=0)


def test_a_stored_null_reads_as_the_fields_default() -> None:
    """A trial recovered from the spool stores null for what it had not recorded yet."""
    record = TrialRecord.from_attrs(
        {"gpus": None, "is_reference": None, "candidate": None, "config": {"backend": "swift"}},
        number=1,
    )
    assert record.gpus == [] and record.is_reference is False and record.candidate is None


@pytest.fixture(scope="module")
def cli_built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_cli_study(tmp_path_factory.mktemp("cli-study"))


BASIS = "UPDATE study_user_attributes SET value_json = ? WHERE key = 'comparison_basis'"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stored", "says"),
    [
        (
            '{"reference": {}, "floor": {}, "params": {}}',
            "comparison_basis.evalset: Field required",
        ),
        ('"x"', "comparison_basis: Input should be a valid dictionary"),
        (
            '{"evalset": {"name": 5, "items": "a", "images": "b"}, "reference": {}, "floor": {}, '
            '"params": {}}',
            "comparison_basis.evalset.name: Input should be a valid string",
        ),
    ],
)
def test_a_damaged_comparison_basis_is_named_as_damage(
    cli_built: tuple[Path, Path], tmp_path: Path, stored: str, says: str
) -> None:
    """It read as "made with another evaluation set (None -> smoke)"."""
    db = tampered(cli_built[0], tmp_path, BASIS, args=(stored,))
    done = autotune_cli(
        "run", "--space", str(cli_built[1]), "--study", "smoke", "--storage", f"sqlite:///{db}",
        "--trials", "4", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == f"error: study 'smoke' has an unreadable record: {says}" or (
        line.startswith(f"error: study 'smoke' has an unreadable record: {says}")
    ), line
    assert "another evaluation set" not in line
