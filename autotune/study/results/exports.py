"""Export a stored trial: its configuration, rendered for the requested deploy target."""

from __future__ import annotations

import dataclasses
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.checkpoints.adapters import stored_adapters
from autotune.export import Export, render_export
from autotune.export.reproduce import reproduction
from autotune.params import TrialConfig
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.study.results.select import chosen_trial, deploy_target, infeasibility


def trial_config(trial: FrozenTrial) -> TrialConfig:
    return TrialRecord.of(trial).trial_config()


def study_engine_args(study: optuna.Study, fmt: str) -> dict[str, Any]:
    """The engine_args.<fmt> of the space the study ran with (what its servers were given)."""
    space = StudyRecord.of(study).space
    return dict((space.get("engine_args") or {}).get(fmt) or {})


def export_trial(
    study: optuna.Study,
    *,
    trial_number: int | None,
    fmt: str | None = None,
    host: str = "0.0.0.0",
    port: int | None = None,
) -> tuple[Export, FrozenTrial]:
    """The command of the recommended (or a chosen) trial for `fmt` (default: the study's
    deploy target). A trial whose measurement the command does not reproduce, or that breaks
    a constraint (only `--trial N` can pick one), is exported with a note saying why, and
    `exact` false (`--strict` refuses it)."""
    trial = chosen_trial(study, trial_number)
    fmt = fmt or deploy_target(study) or "swift"
    record = StudyRecord.of(study)
    trial_record = TrialRecord.of(trial)
    model = record.model or record.model_path
    result = render_export(
        trial_record.trial_config(),
        fmt=fmt,
        model=model,
        host=host,
        port=port,
        engine_args=study_engine_args(study, fmt) if fmt != "yaml" else None,
        image_geometry=record.image_geometry,
        adapters=stored_adapters(record),
        quantized_models=_quantized_models(record, str(model)),
    )
    if fmt != "yaml":
        check = reproduction(trial_record, fmt)
        # The renderer's blockers already name an engine or a knob the command changes, which
        # is what the reproduction check found too; saying it twice reads as two reasons.
        if not check.deployable and result.exact:
            result = result.blocked(f"trial {trial.number} is a what-if for {fmt}: {check.reason}.")
    reasons = infeasibility(study, trial)
    if reasons:
        result = result.blocked(f"trial {trial.number} is infeasible: {'; '.join(reasons)}.")
    if record.dummy_weights:
        note = (
            f"measured with random (dummy) weights of {model}'s architecture: speed and memory "
            "carry over, accuracy was not measured; check it on the real checkpoint."
        )
        result = dataclasses.replace(result, notes=[note, *result.notes])
    return result, trial


def _quantized_models(study: StudyRecord, model: str) -> dict[str, str]:
    """The ids `export` prints for a quantised layout: the space's, or for a dummy-weights
    study Qwen's naming of its releases (<model>-FP8)."""
    named = dict(study.quantized_checkpoints)
    if study.dummy_weights:
        for layout in study.quantized_paths:
            named.setdefault(layout, f"{model}-{layout.upper()}")
    return named
