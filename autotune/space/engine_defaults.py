"""The deploy target's own defaults: the baseline a study's recommendation is measured against.

What a user would run without autotune is the deploy engine as its documentation starts it
(`lmdeploy serve api_server M --backend pytorch`, `swift deploy --model M`), not the in-process
reference at batch 1. A space whose deploy target it measures gets that launch as a named
trial: the engine's own defaults (no batch cap, KV share, eager mode, dtype or session length of
autotune's: `TrialConfig.engine_defaults`), loaded at the space's largest concurrency with
full-size images and greedy answers of the reference's length, so it does the work the search
does. A space that never measures its deploy target's engine (an endpoint, an engine this
machine lacks) has none: nothing here could start it; nor has one that says
`engine_defaults_baseline: false` (a study about one launch, smoke-swift).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.backends import BACKENDS
from autotune.params import TrialConfig
from autotune.space.support import config_problems

if TYPE_CHECKING:
    from autotune.space.model import SearchSpace


def defaults_label(target: str) -> str:
    """How `best` and the report name the baseline of deploy target `target`."""
    backend = BACKENDS.get(target)
    if backend is not None and backend.defaults_label:
        return backend.defaults_label
    command = backend.deploy_command if backend is not None else None
    return f"{command or target}'s defaults"


def baseline_config(space: SearchSpace) -> TrialConfig | None:
    """The deploy target's engine started with its defaults, or None when the space does
    not measure that engine (see the module docstring)."""
    backend = BACKENDS.get(space.deploy)
    if not space.engine_defaults_baseline:
        return None
    if backend is None or not backend.server or backend.renderer is None:
        return None
    reference = space.reference_config()
    spec = space.params.get("backend")
    measured = {reference.backend, *(spec.choices or [] if spec is not None else [])}
    if space.deploy not in measured:
        return None
    values = {
        "backend": space.deploy,
        "engine_defaults": True,
        "batch_size": space.server_max_batch_size(),
        "max_new_tokens": reference.max_new_tokens,
        "repetition_penalty": reference.repetition_penalty,
        "seed": reference.seed,
        **backend.defaults,
    }
    config = TrialConfig(**values)
    if config_problems(config.model_dump(), device=space.device):
        return None  # the engine's defaults cannot run here (a CUDA-only default on a CPU)
    return config
