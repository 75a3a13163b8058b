"""Per-trial artifacts: the sample outputs (prompt, answer, reference, score) of every item.

Stored with Optuna's artifact API in a folder beside the study, so optuna-dashboard shows them
on each trial and `autotune report` can put answers next to the numbers.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import tempfile
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact

from autotune.accuracy.scoring import AccuracyReport
from autotune.engines.measurement import Measurement
from autotune.evalset.dataset import EvalSet
from autotune.records.stored import TrialRecord
from autotune.records.writer import write_trial
from autotune.study.store.storage import artifact_dir

SAMPLE_OUTPUTS = "sample_outputs.json"
SAMPLE_OUTPUTS_TABLE = "sample_outputs.jsonl"
ACCURACY_TABLE = "accuracy_by_category.csv"
LOG_TAIL = "log_tail.txt"


def _category_csv(report: AccuracyReport) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["category", "accuracy"])
    writer.writerows([name, f"{value:.4f}"] for name, value in report.by_category.items())
    writer.writerow(["all", f"{report.accuracy:.4f}"])
    return buffer.getvalue()


class ArtifactRecorder:
    def __init__(self, storage_url: str, study_name: str) -> None:
        self.base = artifact_dir(storage_url, study_name)

    def store(self) -> FileSystemArtifactStore:
        self.base.mkdir(parents=True, exist_ok=True)
        return FileSystemArtifactStore(self.base)

    def _upload(self, trial: optuna.Trial, name: str, text: str, mimetype: str) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(text, encoding="utf-8")
            return upload_artifact(
                artifact_store=self.store(),
                file_path=str(path),
                study_or_trial=trial,
                mimetype=mimetype,
                encoding="utf-8",
            )

    def log_tail(self, trial: optuna.Trial, text: str) -> None:
        """A failed trial's server or worker log tail, as a file on its dashboard page."""
        if not text:
            return
        # Best effort: the reason and the tail are user attributes too, and the failure itself
        # must not be masked by a full disk.
        with contextlib.suppress(OSError):
            self._upload(trial, LOG_TAIL, text, "text/plain")

    def sample_outputs(self, trial: optuna.Trial, evalset: EvalSet, m: Measurement) -> None:
        if m.accuracy is None:
            return
        rows = []
        for item in evalset.items:
            if item.id not in m.accuracy.item_scores:
                continue
            rows.append(
                {
                    "id": item.id,
                    "category": item.category,
                    "prompt": item.prompt,
                    "answer": m.predictions.get(item.id),
                    "references": item.answers,
                    "metric": item.metric,
                    "score": m.accuracy.item_scores[item.id],
                    "passed": m.accuracy.item_passed[item.id],
                }
            )
        # Best effort: the answers and scores are user attributes too; a full disk here must
        # not fail a trial that was measured (the storage's own writes decide that).
        try:
            artifact_id = self._upload(
                trial,
                SAMPLE_OUTPUTS,
                json.dumps(rows, indent=1, ensure_ascii=False),
                "application/json",
            )
            # The same rows as JSONL and the per-category scores as CSV: optuna-dashboard
            # shows .jsonl and .csv artifacts as tables on the trial's page.
            self._upload(
                trial,
                SAMPLE_OUTPUTS_TABLE,
                "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                "application/jsonl",
            )
            self._upload(trial, ACCURACY_TABLE, _category_csv(m.accuracy), "text/csv")
        except OSError:
            return
        write_trial(trial, TrialRecord.part(sample_outputs_artifact=artifact_id))
