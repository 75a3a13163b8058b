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

from autotune.backends import lmdeploy, swift, transformers, vllm
from autotune.backends.base import Backend, Flag, FlagTable, InnerEngine
from autotune.backends.plugins import PLUGIN_GROUP, plugins

_BUILT_IN = (transformers.BACKEND, swift.BACKEND, lmdeploy.BACKEND, vllm.BACKEND)

BACKENDS: dict[str, Backend] = {backend.name: backend for backend in _BUILT_IN}
# Plugins, contained: one that raises, exits or hangs is skipped with one line
# (autotune.backends.plugins).
_PLUGINS = plugins(set(BACKENDS))
BACKENDS.update((plugin.name, plugin) for plugin in _PLUGINS)
PLUGINS: frozenset[str] = frozenset(plugin.name for plugin in _PLUGINS)


def server_backends() -> frozenset[str]:
    """Engines measured through a server process rather than in-process."""
    return frozenset(name for name, backend in BACKENDS.items() if backend.server)


def deploy_targets() -> tuple[str, ...]:
    """Engines a recommendation can be deployed with (`autotune export --format`)."""
    return tuple(name for name, backend in BACKENDS.items() if backend.deploy_command)


__all__ = [
    "BACKENDS",
    "PLUGINS",
    "PLUGIN_GROUP",
    "Backend",
    "Flag",
    "FlagTable",
    "InnerEngine",
    "deploy_targets",
    "server_backends",
]
