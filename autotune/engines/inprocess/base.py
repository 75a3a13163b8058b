"""What every in-process engine offers the worker: load, generate a static batch, close."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from PIL import Image

from autotune.measure.timing import RequestTiming
from autotune.params import TrialConfig


@dataclass(frozen=True)
class Request:
    """One chat turn: an image and a text prompt."""

    item_id: str
    image: Image.Image
    prompt: str
    mark: int | None = None  # load tests: the image's cache-busting mark (measure.repeats)


@dataclass(frozen=True)
class Completion:
    item_id: str
    text: str
    timing: RequestTiming


class Engine(Protocol):
    def load(self) -> None:
        """Load weights and build whatever the engine serves with (timed as start-up)."""

    def generate(
        self, batch: list[Request], config: TrialConfig, *, forced_tokens: int | None = None
    ) -> list[Completion]:
        """Answer one static batch; timings start before preprocessing. `forced_tokens`:
        every answer exactly that long (equal work in load tests)."""

    def peak_memory_mib(self) -> tuple[float, str]:
        """Peak memory so far and where it was read (cuda, rss)."""

    def describe(self) -> dict[str, str]:
        """Device and library versions, stored with the trial."""

    def close(self) -> None: ...
