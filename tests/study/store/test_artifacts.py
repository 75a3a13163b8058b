"""Per-trial artifacts: what `autotune dashboard` shows on a trial's page and the report reads."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import optuna
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta

from autotune.accuracy.scoring import AccuracyReport
from autotune.study.store.artifacts import ArtifactRecorder


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
