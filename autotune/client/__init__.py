"""An async OpenAI-compatible chat client and the load loops that drive it (engines.passes
runs a trial's passes through them)."""

from autotune.client.chat import (
    ChatClient,
    ChatError,
    http_client,
    image_data_url,
    list_models,
    normalize_base_url,
)
from autotune.client.load import closed_loop, closed_loop_until, open_loop

__all__ = [
    "ChatClient",
    "ChatError",
    "closed_loop",
    "closed_loop_until",
    "http_client",
    "image_data_url",
    "list_models",
    "normalize_base_url",
    "open_loop",
]
