"""What a trial leaves beside its study (autotune.study.store.spool): the spool, results kept
while the storage refuses them, recorded by the next run, and only into the study they came
from; and per-trial artifacts, what `autotune dashboard` shows on a trial's page and the
report reads."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta

from autotune.accuracy.scoring import AccuracyReport
from autotune.records.parts import Failure
from autotune.study.store.recovery import Spool, failure_of, recover, spool_payload
from autotune.study.store.spool import ArtifactRecorder


def test_sample_outputs_category_table_and_log_tail(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    study = optuna.create_study(study_name="a", storage=url, directions=["maximize", "minimize"])
    items = [
        SimpleNamespace(id="x1", category="ocr", prompt="Read.", answers=["AB"], metric="anls"),
        SimpleNamespace(id="x2", category="caption", prompt="Say.", answers=["c"], metric="anls"),
    ]
    accuracy = AccuracyReport(
        accuracy=0.5,
        by_category={"caption": 0.0, "ocr": 1.0},
        item_scores={"x1": 1.0, "x2": 0.0},
        item_passed={"x1": True, "x2": False},
    )
    measurement = SimpleNamespace(accuracy=accuracy, predictions={"x1": "AB", "x2": "d"})
    recorder = ArtifactRecorder(url, "a")
    trial = study.ask()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ExperimentalWarning of the artifact API
        recorder.sample_outputs(trial, SimpleNamespace(items=items), measurement)  # type: ignore[arg-type]
        recorder.log_tail(trial, "line 1\nTraceback: boom\n")
        recorder.log_tail(trial, "")  # nothing to keep: no empty file
    study.tell(trial, [1.0, 2.0])

    frozen = study.trials[0]
    metas = {m.filename: m for m in get_all_artifact_meta(frozen, storage=study._storage)}
    assert set(metas) == {
        "sample_outputs.json",
        "sample_outputs.jsonl",
        "accuracy_by_category.csv",
        "log_tail.txt",
    }
    store = FileSystemArtifactStore(tmp_path / "a-artifacts")

    def read(name: str) -> str:
        with store.open_reader(metas[name].artifact_id) as reader:
            return reader.read().decode("utf-8")

    assert frozen.user_attrs["sample_outputs_artifact"] == metas["sample_outputs.json"].artifact_id
    rows = [json.loads(line) for line in read("sample_outputs.jsonl").splitlines()]
    assert rows == json.loads(read("sample_outputs.json"))
    assert rows[1] == {
        "id": "x2",
        "category": "caption",
        "prompt": "Say.",
        "answer": "d",
        "references": ["c"],
        "metric": "anls",
        "score": 0.0,
        "passed": False,
    }
    assert read("accuracy_by_category.csv") == (
        "category,accuracy\ncaption,0.0000\nocr,1.0000\nall,0.5000\n"
    )
    assert "Traceback: boom" in read("log_tail.txt")


CONFIG = {"backend": "transformers"}


def _measured_trial(url: str) -> tuple[optuna.Study, Spool]:
    """A study whose trial 0 was measured but whose results the storage never took."""
    study = optuna.create_study(study_name="s", storage=url)
    trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    trial.set_user_attr("config", CONFIG)  # as the objective does before measuring
    spool = Spool(url, "s")
    spool.write(trial.number, spool_payload(trial, [1.5], {"config": CONFIG, "throughput": 1.5}))
    return study, spool


def test_spooled_results_are_recorded_into_their_own_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    study, spool = _measured_trial(url)
    notes = recover(study, spool)
    assert notes == ["recorded the results of trial 0, which the storage could not take then, "
                     "as trial 1"]  # fmt: skip
    recorded = study.trials[1]
    assert recorded.values == [1.5] and recorded.user_attrs["recovered_from_trial"] == 0
    assert spool.pending() == []


def test_results_kept_in_both_spool_folders_are_recorded_once(tmp_path: Path) -> None:
    """Kept beside the study, then again in the temporary folder once that disk filled: the
    next run records the trial once (the full-disk test once saw it recorded twice)."""
    url = f"sqlite:///{tmp_path}/s.db"
    study, spool = _measured_trial(url)
    first = spool.where(0)
    assert first is not None
    second = spool.folders[1] / first.name
    second.parent.mkdir(parents=True, exist_ok=True)
    second.write_bytes(first.read_bytes())
    try:
        notes = recover(study, spool)
    finally:
        second.unlink(missing_ok=True)
    recovered = [t for t in study.trials if "recovered_from_trial" in t.user_attrs]
    assert [t.user_attrs["recovered_from_trial"] for t in recovered] == [0], notes
    assert spool.pending() == []


def test_results_spooled_for_a_deleted_study_never_enter_a_new_one_at_its_path(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    _, spool = _measured_trial(url)
    (tmp_path / "s.db").unlink()  # the user starts over under the same name
    fresh = optuna.create_study(study_name="s", storage=url)
    notes = recover(fresh, spool)
    assert fresh.trials == []
    assert len(notes) == 1 and notes[0].startswith("discarded the spooled results of a trial 0")
    assert spool.pending() == []
    # Also when the new study already has a trial 0 of its own, started later.
    _, spool = _measured_trial(f"sqlite:///{tmp_path}/t.db")
    (tmp_path / "t.db").unlink()
    fresh = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/t.db")
    time.sleep(1.1)  # its trial 0 starts a second after the spooled one
    fresh.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    assert recover(fresh, spool)[0].startswith("discarded")
    assert [t.state for t in fresh.trials] == [optuna.trial.TrialState.RUNNING]


def _spool_file(spool: Spool, number: int, text: str) -> Path:
    path = spool.folders[0] / f"trial-{number}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


NOT_MEASUREMENTS = {
    "an empty object": "{}",
    "a list": "[1.5]",
    "a number": "3",
    "not JSON": "{'values': [1.5]",
    "values as strings": '{"number": 0, "values": ["1.5"], "user_attrs": {}}',
    "a NaN value": '{"number": 0, "values": [NaN], "user_attrs": {}}',
    "two values for one objective": '{"number": 0, "values": [1.5, 2], "user_attrs": {}}',
    "no values": '{"number": 0, "values": [], "user_attrs": {}}',
    "a mistyped record": '{"number": 0, "values": [1.5], "user_attrs": {"accuracy": "high"}}',
    "another trial's number": '{"number": 7, "values": [1.5], "user_attrs": {}}',
    "a value outside its distribution": (
        '{"number": 0, "values": [1.5], "params": {"x": 5}, "user_attrs": {}, "distributions": '
        '{"x": "{\\"name\\": \\"FloatDistribution\\", \\"attributes\\": {\\"low\\": 0, '
        '\\"high\\": 1, \\"log\\": false, \\"step\\": null}}"}}'
    ),
    "an unknown distribution": (
        '{"number": 0, "values": [1.5], "params": {"x": 0.5}, "user_attrs": {}, '
        '"distributions": {"x": "{\\"name\\": \\"BetaDistribution\\", \\"attributes\\": {}}"}}'
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(NOT_MEASUREMENTS))
def test_a_spool_file_that_holds_no_measurement_is_set_aside_and_named(
    tmp_path: Path, case: str
) -> None:
    """Recovery never records what is not a measurement, says what it discarded, and keeps
    the file (renamed) for a person to look at."""
    url = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(study_name="s", storage=url)
    study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    spool = Spool(url, "s")
    path = _spool_file(spool, 0, NOT_MEASUREMENTS[case])
    (note,) = recover(study, spool)
    assert note.startswith(f"discarded the spool file {path}: it holds no measurement"), note
    assert "\n" not in note
    assert len(study.trials) == 1  # nothing recorded
    assert not path.exists() and (path.parent / f"{path.name}.unreadable").is_file()
    assert recover(study, spool) == []  # said once


def test_the_trial_whose_results_were_spooled_gets_a_reason(tmp_path: Path) -> None:
    """SQLite on a full disk: Optuna could still end the trial FAIL, not write why. The run
    that records its spooled results says why in the study."""
    url = f"sqlite:///{tmp_path}/s.db"
    study, spool = _measured_trial(url)
    study.tell(0, state=optuna.trial.TrialState.FAIL)
    recover(study, spool)
    (failed,) = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert failure_of(study, failed) == Failure(
        failure_kind="recovered",
        failure_reason="its results could not be stored then; recorded as trial 1",
    )


def test_a_trial_the_storage_ended_without_a_reason_gets_the_noted_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(study_name="s", storage=url)
    trial = study.ask()
    spool = Spool(url, "s")
    spool.note_failure(trial, "storage", "cannot write to the study's storage: disk full")
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert recover(study, spool) == [
        "trial 0 failed: cannot write to the study's storage: disk full"
    ]
    assert failure_of(study, study.trials[0]).failure_kind == "storage"
    assert spool.pending("failed") == []
