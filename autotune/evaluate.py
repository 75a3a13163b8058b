"""`autotune eval`: score one configuration without a study, with the code a trial uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml
from pydantic import ValidationError

from autotune.errors import AutotuneError, SpaceError, did_you_mean
from autotune.measure.measurement import measure_once
from autotune.params import PARAM_NAMES, SAMPLING_PARAMS, TrialConfig
from autotune.study import StudyPlan


def parse_overrides(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """`name=value` pairs; values parse as YAML scalars (null, true, 256, 0.7, bfloat16)."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise AutotuneError(
                f"--param '{pair}': write it as name=value, e.g. image_max_side=256"
            )
        if name not in PARAM_NAMES:
            raise AutotuneError(
                f"--param {name}: unknown parameter; {did_you_mean(name, PARAM_NAMES)}"
                f"known: {', '.join(PARAM_NAMES)}"
            )
        try:
            overrides[name] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            overrides[name] = raw
    return overrides


def configured(reference: TrialConfig, overrides: dict[str, Any]) -> TrialConfig:
    """The reference with `overrides` applied; sampling knobs drop when greedy."""
    values = reference.model_dump()
    values.update(overrides)
    if not values.get("do_sample"):
        for name in SAMPLING_PARAMS:
            if name not in overrides:
                values[name] = None
    try:
        return TrialConfig(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "configuration"
        message = str(error["msg"]).removeprefix("Value error, ")
        raise SpaceError(f"--param {where}: {message}") from None


def evaluate(
    plan: StudyPlan,
    overrides: dict[str, Any],
    *,
    endpoint: str | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure the space's reference (with overrides) once; the result as a JSON-able dict."""
    config = configured(plan.space.reference_config(), overrides)
    m = measure_once(
        plan.space,
        config,
        model_path=plan.model_path,
        evalset=plan.evalset,
        on_phase=on_phase,
        endpoint=endpoint,
        image_geometry=plan.image_geometry,
        measure_accuracy=not plan.dummy_weights,  # random weights answer noise
    )
    accuracy = m.accuracy
    return {
        "model": plan.model,
        "evalset": plan.evalset.name,
        "items": len(plan.evalset.items),
        "config": config.model_dump(),
        "accuracy": accuracy.accuracy if accuracy else None,
        "accuracy_by_category": accuracy.by_category if accuracy else {},
        "figures": m.figures,
        "dummy_weights": plan.dummy_weights,
        "memory_source": m.memory_source,
        "environment": m.environment,
    }
