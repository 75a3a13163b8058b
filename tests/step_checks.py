"""What a study's steps changed, read back from its storage (issue 40: a step changes its own
lever and nothing else, or names what else it changed)."""

from __future__ import annotations

from typing import Any

import optuna


def step_changes(study: optuna.Study) -> list[tuple[int, dict[str, Any], set[str]]]:
    """Per trial proposed as a step: (number, its `step` record, the configuration values that
    differ from the trial it stepped from)."""
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    changes = []
    for trial in trials.values():
        step = trial.user_attrs.get("step")
        if not step or "config" not in trial.user_attrs:
            continue
        base = trials[step["from_trial"]].user_attrs["config"]
        config = trial.user_attrs["config"]
        differ = {n for n in config.keys() | base.keys() if config.get(n) != base.get(n)}
        changes.append((trial.number, step, differ))
    return changes


def assert_one_lever_each(study: optuna.Study) -> int:
    """Every step changed its lever (and what its `also` names) only; the number of steps."""
    changes = step_changes(study)
    for number, step, differ in changes:
        allowed = {step["lever"], *step.get("also", [])}
        assert step["lever"] in differ and differ <= allowed, (number, step, differ)
    return len(changes)
