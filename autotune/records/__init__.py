"""What the layers above hand each other: one request/reply pair for every engine and client,
and the typed result of one trial's session."""

from autotune.records.exchange import Prompt, Reply
from autotune.records.session import PassesResult, SessionResult

__all__ = ["PassesResult", "Prompt", "Reply", "SessionResult"]
