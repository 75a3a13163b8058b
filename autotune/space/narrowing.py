"""A space narrowed to where it runs: a server someone else started, the engines installed on
this machine, the GPUs a run was given. Each returns a new space (and what it dropped) and
refuses, in one line, a space whose reference or candidates cannot run there."""

from __future__ import annotations

from autotune.errors import SpaceError
from autotune.params import DEPLOY_TARGETS, REQUEST_PARAMS
from autotune.space.availability import missing_reason
from autotune.space.model import SearchSpace


def for_endpoint(space: SearchSpace) -> SearchSpace:
    """`space` for a server that is already running: request-side parameters only.

    Server-side parameters stay at their reference values (they describe nothing about the
    endpoint), and no baseline of the deploy target's defaults is measured; start-up time and
    memory cannot be seen from a client, so they can be neither an objective nor a
    constraint.
    """
    unmeasurable = {"startup_s", "peak_memory_mib"}
    bad = [o.metric for o in space.objectives if o.metric in unmeasurable]
    if bad:
        raise SpaceError(
            f"objective {bad[0]} cannot be measured through --endpoint (the server was not "
            "started by autotune); use a space without it"
        )
    params = {name: spec for name, spec in space.params.items() if name in REQUEST_PARAMS}
    constraints = space.constraints.model_copy(update={"memory_budget_mib": None})
    # No engine's defaults either: autotune starts nothing there, so none would be measured.
    update = {"params": params, "constraints": constraints, "engine_defaults_baseline": False}
    return space.model_copy(update=update)


def runnable_here(space: SearchSpace) -> tuple[SearchSpace, list[str]]:
    """`space` without the choices that cannot run on this machine, and what was dropped.

    The reference must be runnable: every trial is compared with it.
    """
    reference = space.reference_config().model_dump()
    for name, value in reference.items():
        reason = missing_reason(name, value)
        if reason is not None:
            raise SpaceError(f"{space.source or space.name}: the reference needs {reason}")
    params = dict(space.params)
    dropped: list[str] = []
    for name, spec in space.params.items():
        if spec.choices is None:
            continue
        keep = [value for value in spec.choices if missing_reason(name, value) is None]
        reasons = [r for v in spec.choices if (r := missing_reason(name, v)) is not None]
        if not keep:
            raise SpaceError(
                f"{space.source or space.name}: no choice of params.{name} can run here: "
                + "; ".join(reasons)
            )
        dropped += reasons
        if len(keep) != len(spec.choices):
            params[name] = spec.model_copy(update={"choices": keep})
    restricted = space.model_copy(update={"params": params})
    if not restricted.deployable_backends():
        why = "; ".join(dropped) or "the space searches no backend that serves it"
        raise SpaceError(
            f"{space.source or space.name}: deploy target {space.deploy}: no backend this "
            f"space can run here reproduces on it ({why}); install the engine, or set "
            f"deploy: to one of {', '.join(DEPLOY_TARGETS)}"
        )
    return restricted, [f"dropped from the search: {reason}" for reason in dropped]


def for_gpus(space: SearchSpace, count: int) -> tuple[SearchSpace, list[str]]:
    """`space` with tensor_parallel limited to the `count` GPUs a run may give one
    launch, and what was dropped. 1 for a run without GPUs."""
    where = space.source or space.name
    if space.reference_config().tensor_parallel > count:
        raise SpaceError(
            f"{where}: the reference needs tensor_parallel "
            f"{space.reference_config().tensor_parallel} GPUs and this run has {count}; "
            "give more with --gpus, or lower it"
        )
    for candidate in space.candidates:
        needs = space.candidate_config(candidate.name).tensor_parallel
        if needs > count:
            raise SpaceError(
                f"{where}: candidate '{candidate.name}' needs tensor_parallel {needs} GPUs "
                f"and this run has {count}; give more with --gpus, or lower it"
            )
    spec = space.params.get("tensor_parallel")
    if spec is None:
        return space, []
    if spec.choices is not None:
        keep = [value for value in spec.choices if int(value) <= count]
        dropped = [int(value) for value in spec.choices if int(value) > count]
        narrowed = spec.model_copy(update={"choices": keep})
    else:
        assert spec.low is not None and spec.high is not None
        keep = [count] if spec.low <= count else []
        dropped = [count + 1] if spec.high > count else []
        narrowed = spec.model_copy(update={"high": float(min(spec.high, count))})
    if not keep:
        raise SpaceError(
            f"{where}: every params.tensor_parallel value needs more than the {count} "
            "GPU(s) this run has; give more with --gpus"
        )
    if not dropped:
        return space, []
    params = {**space.params, "tensor_parallel": narrowed}
    note = (
        f"dropped from the search: tensor_parallel above {count} (this run has {count} "
        "GPU(s); --gpus gives more)"
    )
    return space.model_copy(update={"params": params}), [note]
