"""Per-trial artifacts: the sample outputs (prompt, answer, reference, score) of every item.

Stored with Optuna's artifact API in a folder beside the study, so optuna-dashboard shows them
on each trial and `autotune report` can put answers next to the numbers.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact

from autotune.evalset.dataset import EvalSet
from autotune.storage import artifact_dir
from autotune.trial import Measurement

SAMPLE_OUTPUTS = "sample_outputs.json"


class ArtifactRecorder:
    def __init__(self, storage_url: str, study_name: str) -> None:
        self.base = artifact_dir(storage_url, study_name)

    def store(self) -> FileSystemArtifactStore:
        self.base.mkdir(parents=True, exist_ok=True)
        return FileSystemArtifactStore(self.base)

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
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / SAMPLE_OUTPUTS
            path.write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")
            artifact_id = upload_artifact(
                artifact_store=self.store(),
                file_path=str(path),
                study_or_trial=trial,
                mimetype="application/json",
                encoding="utf-8",
            )
        trial.set_user_attr("sample_outputs_artifact", artifact_id)
