"""Build a finished autotune study directly with Optuna, in milliseconds, for reading tests.

The study looks like what `autotune run` stores: the same directions, study attributes, trial
user attributes, constraint values and a sample_outputs.json artifact per completed trial, plus
one infeasible trial, one failed trial (reason and log tail) and one pruned trial. Tests of
`best`, `export`, `report` and `dashboard` use it instead of running real inference, and
plot_data to read a report's figures back.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune.params import TrialConfig
from autotune.study.results.select import CONSTRAINT_NAMES
from autotune.study.store.storage import artifact_dir

DISTRIBUTIONS = {
    "attn_implementation": CategoricalDistribution(["sdpa", "eager"]),
    "image_max_side": CategoricalDistribution([None, 1024, 768, 512]),
    "batch_size": CategoricalDistribution([1, 4, 16]),
}

ITEMS = [
    ("ocr-001", "ocr", "Read the text in the image.", ["INVOICE 4711"]),
    ("ocr-002", "ocr", "What is the total amount?", ["$12.50"]),
    ("ocr-003", "ocr", "Read the sign.", ["NO PARKING"]),
    ("cap-001", "caption", "Describe the image in one sentence.", ["a red square on white"]),
    ("cap-002", "caption", "Describe the image in one sentence.", ["two blue circles"]),
]

ENVIRONMENT = {
    "device": "cuda",
    "gpu_name": "NVIDIA H200",
    "torch_version": "2.14.1",
    "transformers_version": "5.18.0",
}


MAX_DROP = 0.05
PAIRED_HALF_WIDTH = 0.02


@dataclass(frozen=True)
class Spec:
    """One trial to add: its parameters, figures and how it ended."""

    params: dict[str, Any]
    throughput: float
    p95_ms: float
    accuracy: float
    state: TrialState = TrialState.COMPLETE
    reference: bool = False
    failure: str | None = None
    ci_rel: float | None = None  # the throughput's 95% interval, relative
    duplicate_of: int | None = None  # a repeated proposal: the trial's figures are copied
    one_token: bool = False  # one-token answers: no TPOT (NaN)
    baseline: str | None = None  # the deploy target's defaults: the baseline's label


def _p(attn: str, side: int | None, batch: int) -> dict[str, Any]:
    return {"attn_implementation": attn, "image_max_side": side, "batch_size": batch}


# Trial 0 is the reference; 3 is infeasible (accuracy), 6 failed, 7 was pruned by screening.
SPECS = [
    Spec(_p("sdpa", None, 1), 41.0, 2100, 0.90, reference=True),
    Spec(_p("sdpa", 1024, 4), 118.0, 2650, 0.90),
    Spec(_p("sdpa", 768, 16), 305.5, 4200, 0.88),
    Spec(_p("eager", 512, 16), 352.0, 3900, 0.62),
    Spec(_p("eager", 1024, 1), 39.0, 2300, 0.90),
    Spec(_p("sdpa", 768, 4), 126.0, 2400, 0.88),
    Spec(_p("sdpa", None, 16), 0, 0, 0, state=TrialState.FAIL, failure="out of memory"),
    Spec(_p("eager", 512, 4), 0, 0, 0.40, state=TrialState.PRUNED),
]

BASELINE_LABEL = "LMDeploy's defaults"
# The reference, a tuned trial (the recommendation) and the deploy target's defaults, each
# with a throughput interval: the gain over the baseline and the cost per million tokens.
BASELINE_SPECS = [
    Spec(_p("sdpa", None, 1), 41.0, 2100, 0.90, reference=True, ci_rel=0.08),
    Spec(_p("sdpa", 768, 16), 305.5, 4200, 0.90, ci_rel=0.03),
    Spec(_p("sdpa", None, 16), 200.0, 5200, 0.90, ci_rel=0.04, baseline=BASELINE_LABEL),
]


def _config(params: dict[str, Any]) -> dict[str, Any]:
    return TrialConfig(
        backend="transformers", dtype="bfloat16", max_new_tokens=64, **params
    ).model_dump()


def _item_scores(accuracy: float) -> dict[str, float]:
    # The first round(accuracy * n) items pass: per-item scores consistent with the total.
    n_pass = round(accuracy * len(ITEMS))
    return {item[0]: 1.0 if i < n_pass else 0.0 for i, item in enumerate(ITEMS)}


def _user_attrs(spec: Spec, reference_accuracy: float) -> dict[str, Any]:
    config = _config(spec.params)
    attrs: dict[str, Any] = {"config": config, "is_reference": spec.reference}
    if spec.baseline is not None:
        attrs["baseline"] = spec.baseline
    if spec.state == TrialState.FAIL:
        attrs["failure_kind"] = "oom"
        attrs["failure_reason"] = spec.failure
        attrs["log_tail"] = "loading weights\ntorch.OutOfMemoryError: CUDA out of memory\n"
        return attrs
    scores = _item_scores(spec.accuracy)
    by_category: dict[str, list[float]] = {}
    for item_id, category, _prompt, _refs in ITEMS:
        by_category.setdefault(category, []).append(scores[item_id])
    accuracy_drop = reference_accuracy - spec.accuracy
    # The floor's rule (autotune.study.run.objective.constraint_values): the paired interval's
    # lower end, here the drop widened by PAIRED_HALF_WIDTH, must stay above -max_drop.
    ci_low = -accuracy_drop - PAIRED_HALF_WIDTH
    attrs.update(
        {
            "accuracy": spec.accuracy,
            "accuracy_by_category": {k: sum(v) / len(v) for k, v in by_category.items()},
            "item_scores": scores,
            "item_passed": {k: v >= 1.0 for k, v in scores.items()},
            "items_scored": len(scores),
            "predictions": {item[0]: item[3][0] if scores[item[0]] else "???" for item in ITEMS},
            "environment": ENVIRONMENT,
            "memory_source": "cuda",
            "autotune_version": "0.1.0",
            "schema_version": 1,
            "constraints": {
                "accuracy": 0.0 if spec.reference else -MAX_DROP - ci_low,
                "memory": -4000.0 + spec.params["batch_size"] * 50,
                "latency": 0.0,
            },
        }
    )
    if spec.state == TrialState.COMPLETE:
        batch = spec.params["batch_size"]
        attrs.update(
            {
                "throughput_output_tokens_per_s": spec.throughput,
                "throughput_requests_per_s": spec.throughput / 40,
                "e2e_latency_p50_ms": spec.p95_ms * 0.8,
                "e2e_latency_p95_ms": float(spec.p95_ms),
                "ttft_p50_ms": 180.0 + 20 * batch,
                "ttft_p95_ms": 240.0 + 25 * batch,
                "tpot_p50_ms": 22.0 + batch,
                "tpot_p95_ms": 30.0 + batch,
                "peak_memory_mib": 5200.0 + 120 * batch,
                "startup_s": 14.2,
                "compile_s": 0.0,
                "measured_requests": 64,
                "output_tokens_per_request": 1.0 if spec.one_token else 40.0,
            }
        )
        if spec.one_token:
            attrs["tpot_p50_ms"] = attrs["tpot_p95_ms"] = math.nan
        if spec.ci_rel is not None:
            attrs["throughput_ci_rel"] = spec.ci_rel
        if not spec.reference:
            attrs["paired_vs_reference"] = {
                "n_items": len(ITEMS),
                "accuracy_diff": -accuracy_drop,
                "ci_low": ci_low,
                "ci_high": -accuracy_drop + PAIRED_HALF_WIDTH,
                "confidence": 0.95,
                "only_candidate_passed": 0,
                "only_reference_passed": round(accuracy_drop * len(ITEMS)),
                "mcnemar_p": 1.0,
            }
    return attrs


def _sample_outputs(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": item_id,
            "category": category,
            "prompt": prompt,
            "answer": attrs["predictions"][item_id],
            "references": refs,
            "metric": "anls",
            "score": attrs["item_scores"][item_id],
            "passed": attrs["item_passed"][item_id],
        }
        for item_id, category, prompt, refs in ITEMS
    ]


def _upload(store: FileSystemArtifactStore, trial: optuna.Trial, name: str, text: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(text, encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ExperimentalWarning of the artifact API
            return upload_artifact(
                artifact_store=store, file_path=str(path), study_or_trial=trial, encoding="utf-8"
            )


# What a trial of a --dummy-weights study never records: random weights answer noise.
ACCURACY_ATTRS = (
    "accuracy",
    "accuracy_by_category",
    "item_scores",
    "item_passed",
    "items_scored",
    "predictions",
    "paired_vs_reference",
)


def _dummy_weights(attrs: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in attrs.items() if k not in ACCURACY_ATTRS}
    if "constraints" in kept:
        kept["constraints"] = {**kept["constraints"], "accuracy": 0.0}
    return kept


def build_study(
    directory: Path,
    *,
    study_name: str = "small",
    specs: list[Spec] | None = None,
    dummy_weights: bool = False,
) -> tuple[str, str]:
    """Create the study in `directory`/<study_name>.db; returns (storage_url, study_name).

    `dummy_weights`: as `autotune run --dummy-weights` stores it: no accuracy anywhere, the
    accuracy constraint switched off."""
    specs = SPECS if specs is None else specs
    storage_url = f"sqlite:///{directory / study_name}.db"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Built in memory and copied to SQLite at the end: one transaction instead of a commit per
    # attribute (seconds on a busy disk).
    study = optuna.create_study(study_name=study_name, directions=["maximize", "minimize"])
    for key, value in {
        "space_name": "default",
        "model": "Qwen/Qwen3-VL-2B-Instruct",
        "model_path": "/models/Qwen3-VL-2B-Instruct",
        "evalset": "evalsets/smoke/items.jsonl",
        "objective_metrics": ["throughput_output_tokens_per_s", "e2e_latency_p95_ms"],
        "endpoint": None,
        "notes": [],
        "autotune_version": "0.1.0",
        "schema_version": 1,
        **(
            {"dummy_weights": True, "space": {"constraints": {"accuracy": {"enabled": False}}}}
            if dummy_weights
            else {}
        ),
    }.items():
        study.set_user_attr(key, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ExperimentalWarning
        study.set_metric_names(["throughput_output_tokens_per_s", "e2e_latency_p95_ms"])
    store_dir = artifact_dir(storage_url, study_name)
    store_dir.mkdir(parents=True, exist_ok=True)
    store = FileSystemArtifactStore(store_dir)
    done = TrialState.COMPLETE
    reference_accuracy = next((s.accuracy for s in specs if s.reference and s.state == done), 0.9)
    for spec in specs:
        # ask/tell like a real run: artifacts can only be attached while a trial is running.
        twin = specs[spec.duplicate_of] if spec.duplicate_of is not None else None
        study.enqueue_trial(twin.params if twin else spec.params)
        trial = study.ask(DISTRIBUTIONS)
        if twin is not None:  # as autotune.study.run.objective.copy_twin records it
            attrs = {**_user_attrs(twin, reference_accuracy), "is_reference": False}
            trial.set_user_attr("duplicate_of", spec.duplicate_of)
            for key, value in attrs.items():
                trial.set_user_attr(key, value)
            for name in CONSTRAINT_NAMES:
                trial.set_constraint(name, attrs["constraints"][name])
            study.tell(trial, [twin.throughput, float(twin.p95_ms)])
            continue
        attrs = _user_attrs(spec, reference_accuracy)
        if dummy_weights:
            attrs = _dummy_weights(attrs)
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        if "constraints" in attrs:
            for name in CONSTRAINT_NAMES:
                trial.set_constraint(name, attrs["constraints"][name])
        if "predictions" in attrs:
            rows = _sample_outputs(attrs)
            artifact_id = _upload(store, trial, "sample_outputs.json", json.dumps(rows, indent=1))
            trial.set_user_attr("sample_outputs_artifact", artifact_id)
            jsonl = "".join(json.dumps(row) + "\n" for row in rows)
            _upload(store, trial, "sample_outputs.jsonl", jsonl)
            csv = "category,accuracy\n" + "".join(
                f"{k},{v:.4f}\n" for k, v in attrs["accuracy_by_category"].items()
            )
            _upload(store, trial, "accuracy_by_category.csv", csv)
        if "log_tail" in attrs:
            _upload(store, trial, "log_tail.txt", attrs["log_tail"])
        if spec.state == TrialState.COMPLETE:
            study.tell(trial, [spec.throughput, float(spec.p95_ms)])
        else:
            study.tell(trial, state=spec.state)
    optuna.copy_study(
        from_study_name=study_name,
        from_storage=study._storage,
        to_storage=storage_url,
        to_study_name=study_name,
    )
    return storage_url, study_name


def plot_data(document: str, div_id: str) -> list[dict]:
    """The traces Plotly.newPlot is called with for the figure in `div_id`."""
    match = re.search(
        r'Plotly\.newPlot\(\s*"' + re.escape(div_id) + r'",\s*(\[.*?\]),\s*\{', document, re.S
    )
    assert match, f"no figure {div_id}"
    return json.loads(match.group(1))
