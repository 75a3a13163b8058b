"""How a space proposes a configuration: which parameters apply given the values decided so
far, the choices each backend can serve, the Optuna distribution each is asked from, and the
enqueued values that reproduce the reference or a named candidate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.params import (
    BACKEND_PARAMS,
    BACKEND_QUALIFIER,
    PARAM_NAMES,
    SAMPLING_PARAMS,
    SERVER_BACKENDS,
    TrialConfig,
    clear_unused_launch_params,
)
from autotune.space.model import SearchSpace, is_int_param
from autotune.space.settings import ParamSpec
from autotune.space.support import supported_choices, unsupported_reason

if TYPE_CHECKING:
    import optuna


def fixed_params(space: SearchSpace, config: TrialConfig) -> dict[str, Any]:
    """The values of `config` that lie inside the search, for `study.enqueue_trial`,
    under their Optuna names."""
    values = config.model_dump()
    fixed = {}
    for name in PARAM_NAMES:
        found = searched(space, name, values)
        if found is not None and contains(found[1], values[name]):
            fixed[found[0]] = values[name]
    return fixed


def applies(space: SearchSpace, name: str, decided: dict[str, Any]) -> bool:
    """Whether parameter `name` is searched, given the values decided so far."""
    backend = decided.get("backend", space.reference_config().backend)
    if name not in BACKEND_PARAMS[backend]:
        return False
    if name in SAMPLING_PARAMS and not decided.get("do_sample", False):
        return False
    spec = space.params.get(name)
    if spec is None:
        return False
    return all(decided.get(other) in values for other, values in spec.when.items())


def searched(
    space: SearchSpace, name: str, decided: dict[str, Any]
) -> tuple[str, ParamSpec] | None:
    """The Optuna name and the spec parameter `name` is suggested from, given the values
    decided so far; None when it is not searched for them.

    Choices the decided backend cannot serve (autotune.space.support) are left out. A
    backend left with fewer choices than the space lists gets its own Optuna name
    (`kv_quant@vllm`), since Optuna holds one distribution per name; one left with a
    single choice is not searched at all.
    """
    if not applies(space, name, decided):
        return None
    spec = space.params[name]
    if spec.choices is None:
        return name, spec
    backend = decided["backend"] if "backend" in decided else space.reference_config().backend
    narrowed = narrowed_spec(space, name, str(backend))
    keep = narrowed.choices or []
    if len(keep) == len(spec.choices):
        return name, spec
    if len(keep) < 2:
        return None
    return f"{name}{BACKEND_QUALIFIER}{backend}", narrowed


def narrowed_spec(space: SearchSpace, name: str, backend: str) -> ParamSpec:
    """Parameter `name`'s spec with only the choices `backend` can serve (a range as is)."""
    spec = space.params[name]
    if spec.choices is None:
        return spec
    keep = supported_choices(backend, name, spec.choices, device=space.device)
    return spec.model_copy(update={"choices": keep})


def unsearched_value(space: SearchSpace, name: str, values: dict[str, Any]) -> Any:
    """The value of a parameter the space lists but the backend cannot vary: the one
    supported choice, or the plain value when none is."""
    backend = str(values["backend"])
    if unsupported_reason(backend, name, values[name], device=space.device) is None:
        return values[name]
    keep = narrowed_spec(space, name, backend).choices
    return keep[0] if keep else TrialConfig.model_fields[name].default


def unsupported_notes(space: SearchSpace) -> list[str]:
    """Each combination of a searched backend and a listed value that is never proposed,
    once, with the reason."""
    spec = space.params.get("backend")
    backends = list(spec.choices) if spec is not None and spec.choices else []
    reference = space.reference_config().backend
    backends += [] if reference in backends else [reference]
    notes = []
    for backend in backends:
        for name, param in space.params.items():
            if param.choices is None or not applies(space, name, {"backend": backend}):
                continue
            for value in param.choices:
                reason = unsupported_reason(str(backend), name, value, device=space.device)
                if reason is not None:
                    notes.append(f"not proposed: {name} {value} on {backend}: {reason}")
    return notes


def suggest(
    space: SearchSpace, trial: optuna.trial.BaseTrial, *, fixed: TrialConfig | None = None
) -> TrialConfig:
    """Ask the trial for each applicable parameter and build the configuration.

    With `fixed` (the reference), the trial is asked only for the values that lie inside
    the search (enqueued, so the sampler returns them); the others are kept as given.
    """
    values = (fixed or space.reference_config()).model_dump()
    if fixed is None:
        for name in SAMPLING_PARAMS:
            values[name] = None  # a reference that samples must not leak into greedy trials
    for name in PARAM_NAMES:
        found = searched(space, name, values)
        if found is None:
            if applies(space, name, values) and space.params[name].choices is not None:
                values[name] = unsearched_value(space, name, values)
            continue
        key, spec = found
        if fixed is not None and not contains(spec, values[name]):
            continue
        values[name] = suggest_one(trial, key, name, spec)
    if not values["do_sample"]:
        for name in SAMPLING_PARAMS:
            values[name] = None
    clear_unused_launch_params(values)
    if values["backend"] not in SERVER_BACKENDS or values.get("engine_defaults"):
        values["max_batch_size"] = None  # in-process, or the engine's own cap
    elif values["max_batch_size"] is None or not applies(space, "max_batch_size", values):
        values["max_batch_size"] = space.server_max_batch_size()
    return TrialConfig(**values)


def reference_params(space: SearchSpace) -> dict[str, Any]:
    """The reference's values that lie inside the search, for `study.enqueue_trial`."""
    return fixed_params(space, space.reference_config())


def distribution(space: SearchSpace, key: str) -> optuna.distributions.BaseDistribution:
    """The Optuna distribution the parameter named `key` (`name` or `name@backend`) is
    suggested from (see suggest_one and `searched`)."""
    import optuna

    name, _, backend = key.partition(BACKEND_QUALIFIER)
    spec = narrowed_spec(space, name, backend) if backend else space.params[name]
    if spec.choices is not None:
        return optuna.distributions.CategoricalDistribution(spec.choices)
    assert spec.low is not None and spec.high is not None
    if is_int_param(name):
        step = int(spec.step) if spec.step else 1
        return optuna.distributions.IntDistribution(
            int(spec.low), int(spec.high), step=step, log=spec.log
        )
    return optuna.distributions.FloatDistribution(spec.low, spec.high, step=spec.step, log=spec.log)


def suggest_one(trial: optuna.trial.BaseTrial, key: str, name: str, spec: ParamSpec) -> Any:
    """Ask `trial` for parameter `name` under its Optuna name `key`."""
    if spec.choices is not None:
        return trial.suggest_categorical(key, spec.choices)
    assert spec.low is not None and spec.high is not None
    if is_int_param(name):
        step = int(spec.step) if spec.step else 1
        return trial.suggest_int(key, int(spec.low), int(spec.high), step=step, log=spec.log)
    return trial.suggest_float(key, spec.low, spec.high, step=spec.step, log=spec.log)


def contains(spec: ParamSpec, value: Any) -> bool:
    if spec.choices is not None:
        return any(value == choice and type(value) is type(choice) for choice in spec.choices)
    if value is None or isinstance(value, bool):
        return False
    return spec.low <= value <= spec.high  # type: ignore[operator]
