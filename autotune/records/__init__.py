"""What the layers above hand each other: one request/reply pair for every engine and client."""

from autotune.records.exchange import Prompt, Reply

__all__ = ["Prompt", "Reply"]
