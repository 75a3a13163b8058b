"""LMDeploy's `lmdeploy serve api_server`, with its PyTorch engine."""

from autotune.backends.base import Backend

BACKEND = Backend(
    name="lmdeploy",
    # Its PyTorch engine runs its own attention kernels: no attn_implementation to choose.
    lacks=frozenset({"attn_implementation"}),
    startup_guess_s=90.0,
    server=True,
    deploy_command="lmdeploy serve api_server",
    deploys=frozenset({"lmdeploy"}),
    package="lmdeploy",
    module="lmdeploy",
    program="lmdeploy",
    install_hint="pip install 'autotune[lmdeploy]'",
    forces_length=True,
)
