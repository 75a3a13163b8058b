"""Plain transformers, in autotune's own worker process: the reference engine."""

from autotune.backends.base import Backend

BACKEND = Backend(
    name="transformers",
    # In-process, batch_size is the batch: no server cap, no KV-cache share, one GPU.
    lacks=frozenset({"kv_cache_fraction", "max_batch_size", "tensor_parallel"}),
    startup_guess_s=20.0,
)
