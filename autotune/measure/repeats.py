"""Repeated images in a load test: which requests resend an image, and marks for the rest.

A cache of prompts or images (LMDeploy's and vLLM's prefix caching, vLLM's multimodal
processor cache, the in-process vision-embedding cache) speeds up a request only when its image
was seen before. A load test that cycles a few evaluation items would hand every cache a hit
from the second pass on, and a trial on a launch that already served these images would
inherit the previous trial's cache. So every load-test request carries a fresh image, the
item's image with a mark of two pixels that no cache has seen, except a chosen share
(`workload.repeat_image_share`) that resends an earlier request of the same trial, image,
mark and prompt alike. The accuracy pass sends the unmarked images.
"""

from __future__ import annotations

import random
import secrets

from PIL import Image

# A mark is 48 bits in two RGB pixels: a random per-trial part and a request counter.
_COUNTER_BITS = 20


class ImageRepeats:
    """Chooses, request by request, between a fresh image and one already sent."""

    def __init__(self, share: float, *, seed: int = 0) -> None:
        self.share = share
        # Which requests repeat is seeded (the same for every run of the trial); the marks are
        # not, so that no earlier trial's cache can recognise them.
        self._rng = random.Random(seed)
        self._trial_bits = secrets.randbits(48 - _COUNTER_BITS)
        self._sent: list[tuple[str, int]] = []
        self.repeated = 0

    def next(self, item_id: str) -> tuple[str, int]:
        """The item and mark of the next request, given the item the load test would send."""
        if self._sent and self._rng.random() < self.share:
            self.repeated += 1
            return self._rng.choice(self._sent)
        count = len(self._sent) % (1 << _COUNTER_BITS)
        chosen = (item_id, (self._trial_bits << _COUNTER_BITS) | count)
        self._sent.append(chosen)
        return chosen


def mark_image(image: Image.Image, mark: int | None) -> Image.Image:
    """`image` with `mark` written into its two top-left pixels (a copy); unchanged for None.

    Applied after every resize, so the mark survives to the bytes the engine hashes.
    """
    if mark is None:
        return image
    marked = image.convert("RGB") if image.mode != "RGB" else image.copy()
    data = mark.to_bytes(6, "big")
    marked.putpixel((0, 0), (data[0], data[1], data[2]))
    if marked.width > 1:
        marked.putpixel((1, 0), (data[3], data[4], data[5]))
    return marked
