"""How an evaluation image is shrunk before a model sees it: the `image_max_side` knob.

Every path applies it the same way, so a trial, its export and the training data agree: the
in-process engine, the HTTP client (a deployed server gets the image already shrunk) and the
training tools.
"""

from __future__ import annotations

from PIL import Image


def resize_to_max_side(image: Image.Image, max_side: int | None) -> Image.Image:
    """Shrink so the longest side is at most `max_side` (never enlarges), as a client would."""
    if max_side is None or max(image.size) <= max_side:
        return image
    scale = max_side / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS)
