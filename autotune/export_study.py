"""Export a stored trial: its configuration, rendered for the requested deploy target."""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial

from autotune.export import Export, render_export
from autotune.params import TrialConfig
from autotune.select import find_trial, recommend


def trial_config(trial: FrozenTrial) -> TrialConfig:
    return TrialConfig(**trial.user_attrs["config"])


def export_trial(
    study: optuna.Study,
    *,
    trial_number: int | None,
    fmt: str,
    host: str = "0.0.0.0",
    port: int | None = None,
) -> tuple[Export, FrozenTrial]:
    trial = recommend(study).trial if trial_number is None else find_trial(study, trial_number)
    model = study.user_attrs.get("model") or study.user_attrs.get("model_path")
    result = render_export(trial_config(trial), fmt=fmt, model=model, host=host, port=port)
    return result, trial
