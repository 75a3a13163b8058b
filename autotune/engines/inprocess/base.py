"""What every in-process engine offers the worker: load, generate a static batch, close."""

from __future__ import annotations

from typing import Protocol

from autotune.params import TrialConfig
from autotune.records import Prompt, Reply


class Engine(Protocol):
    def load(self) -> None:
        """Load weights and build whatever the engine serves with (timed as start-up)."""

    def generate(
        self, batch: list[Prompt], config: TrialConfig, *, forced_tokens: int | None = None
    ) -> list[Reply]:
        """Answer one static batch; timings start before preprocessing. `forced_tokens`:
        every answer exactly that long (equal work in load tests)."""

    def peak_memory_mib(self) -> tuple[float, str]:
        """Peak memory so far and where it was read (cuda, rss)."""

    def describe(self) -> dict[str, str]:
        """Device and library versions, stored with the trial."""

    def close(self) -> None: ...
