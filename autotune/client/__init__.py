"""An async OpenAI-compatible chat client: measures servers as autotune measures engines."""

from autotune.client.chat import (
    ChatClient,
    ChatError,
    ChatPrompt,
    ChatReply,
    image_data_url,
    list_models,
    normalize_base_url,
)
from autotune.client.load import closed_loop, closed_loop_until, open_loop
from autotune.client.passes import ForcedFields, http_client, run_passes

__all__ = [
    "ChatClient",
    "ChatError",
    "ChatPrompt",
    "ChatReply",
    "ForcedFields",
    "closed_loop",
    "closed_loop_until",
    "http_client",
    "image_data_url",
    "list_models",
    "normalize_base_url",
    "open_loop",
    "run_passes",
]
