"""vLLM's `vllm serve`."""

from autotune.backends.base import Backend

BACKEND = Backend(
    name="vllm",
    # vLLM picks its own attention backend: no attn_implementation to choose.
    lacks=frozenset({"attn_implementation"}),
    startup_guess_s=120.0,
    server=True,
    deploy_command="vllm serve",
    deploys=frozenset({"vllm"}),
    package="vllm",
    module="vllm",
    program="vllm",
    install_hint="pip install 'autotune[vllm]'",
    forces_length=True,
)
