"""ms-swift's `swift deploy`, serving its transformers engine."""

from autotune.backends.base import Backend

BACKEND = Backend(
    name="swift",
    # Its transformers engine is measured plain: no flag of `swift deploy` quantises on load,
    # caches images, captures graphs, splits the model or sizes a KV cache.
    lacks=frozenset(
        {
            "kv_cache_fraction",
            "compile_mode",
            "tensor_parallel",
            "weight_quant",
            "kv_quant",
            "prefix_cache",
        }
    ),
    startup_guess_s=30.0,
    server=True,
    deploy_command="swift deploy",
    # A trial of the in-process transformers engine reproduces under `swift deploy` (under
    # the conditions autotune.export.reproduce checks: no compile, greedy).
    deploys=frozenset({"swift", "transformers"}),
    package="ms-swift",
    module="swift",
    program="swift",
    install_hint="pip install 'autotune[swift]'",
    # ms-swift 4.6's RequestConfig has neither a minimum of tokens nor ignore_eos.
    forces_length=False,
)
