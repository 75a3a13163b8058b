"""One chat turn and its answer, the same for an in-process engine and a server's client.

A load test, the accuracy pass and screening build Prompts from evaluation items; whatever
runs them (transformers in this process, or a server through its chat-completions stream)
returns Replies with the request's timing, so everything above reads one pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

from autotune.measure.timing import RequestTiming


@dataclass(frozen=True)
class Prompt:
    """One chat turn to answer: an image and a text prompt."""

    item_id: str
    image: Image.Image
    prompt: str
    mark: int | None = None  # load tests: the image's cache-busting mark (measure.repeats)


@dataclass(frozen=True)
class Reply:
    """The answer to one Prompt, with when its tokens arrived."""

    item_id: str
    text: str
    timing: RequestTiming
