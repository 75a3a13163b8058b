"""The registry of engines: one module per engine, one line to register it.

Built-in engines live in autotune/backends/<name>.py and are listed in `_BUILT_IN`. An engine
from another package registers itself the way pytest plugins do, with an entry point in its
own pyproject.toml:

    [project.entry-points."autotune.backends"]
    sglang = "autotune_sglang:BACKEND"

where BACKEND is a `Backend` whose `renderer` names its command's renderer. Everything else
asks the registry: which engines exist, which run as servers, which are deploy targets, what
each one lacks. The order is the order the CLI and the errors list them in.
"""

from __future__ import annotations

import sys
from importlib import metadata

from autotune.backends import lmdeploy, swift, transformers, vllm
from autotune.backends.base import Backend, InnerEngine

_BUILT_IN = (transformers.BACKEND, swift.BACKEND, lmdeploy.BACKEND, vllm.BACKEND)
PLUGIN_GROUP = "autotune.backends"


def _plugin_problem(backend: object, entry_name: str, taken: set[str]) -> str | None:
    """Why a plugin's object cannot join the registry, or None."""
    if not isinstance(backend, Backend):
        return f"it is a {type(backend).__name__}, not an autotune.backends.Backend"
    if backend.name != entry_name:
        return f"its Backend is named {backend.name!r}; name the entry point the same"
    if backend.name in taken:
        return f"an engine named {backend.name!r} is registered already"
    # In-process engines run inside autotune's own worker (autotune.engines.inprocess).
    if not backend.server or not backend.deploy_command or not backend.renderer:
        return "a plugin engine must be a server with a deploy_command and a renderer"
    if ":" not in backend.renderer:
        return f"renderer {backend.renderer!r} is not 'module:function'"
    return None


def _plugins(taken: set[str]) -> list[Backend]:
    """The engines other installed packages register; a broken one is skipped with one line
    on stderr, so a bad plugin cannot take autotune down with it."""
    found: list[Backend] = []
    for entry in sorted(metadata.entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            backend = entry.load()
        except Exception as exc:  # any import error of somebody else's package
            problem: str | None = f"it does not import ({type(exc).__name__}: {exc})"
        else:
            problem = _plugin_problem(backend, entry.name, taken)
        if problem is not None:
            print(
                f"autotune: engine plugin {entry.name!r} ({entry.value}) skipped: {problem}",
                file=sys.stderr,
            )
            continue
        found.append(backend)
        taken.add(backend.name)
    return found


BACKENDS: dict[str, Backend] = {backend.name: backend for backend in _BUILT_IN}
BACKENDS.update((backend.name, backend) for backend in _plugins(set(BACKENDS)))


def server_backends() -> frozenset[str]:
    """Engines measured through a server process rather than in-process."""
    return frozenset(name for name, backend in BACKENDS.items() if backend.server)


def deploy_targets() -> tuple[str, ...]:
    """Engines a recommendation can be deployed with (`autotune export --format`)."""
    return tuple(name for name, backend in BACKENDS.items() if backend.deploy_command)


__all__ = [
    "BACKENDS",
    "PLUGIN_GROUP",
    "Backend",
    "InnerEngine",
    "deploy_targets",
    "server_backends",
]
