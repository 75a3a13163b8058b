"""The registry of engines: one module per engine (autotune/backends/<name>.py), one line here.

Everything else asks the registry: which engines exist, which run as servers, which are deploy
targets, what each one lacks. The order is the order the CLI and the errors list them in.
"""

from autotune.backends import lmdeploy, swift, transformers, vllm
from autotune.backends.base import Backend

BACKENDS: dict[str, Backend] = {
    backend.name: backend
    for backend in (transformers.BACKEND, swift.BACKEND, lmdeploy.BACKEND, vllm.BACKEND)
}


def server_backends() -> frozenset[str]:
    """Engines measured through a server process rather than in-process."""
    return frozenset(name for name, backend in BACKENDS.items() if backend.server)


def deploy_targets() -> tuple[str, ...]:
    """Engines a recommendation can be deployed with (`autotune export --format`)."""
    return tuple(name for name, backend in BACKENDS.items() if backend.deploy_command)


__all__ = ["BACKENDS", "Backend", "deploy_targets", "server_backends"]
