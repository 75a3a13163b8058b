"""A content-hash cache of vision embeddings for the in-process engine (prefix_cache what-if).

The performance guide our users follow suggests it: vision encoding is a large share of a
request's latency, and a repeated image needs no second encoding. Qwen3-VL's model computes
image features in `get_image_features(pixel_values, image_grid_thw)`, one image after another
in a flat tensor; the cache wraps that method, hashes each image's patch rows with its grid,
and encodes only the images it has not seen. The embeddings it returns are the ones the vision
tower produced, so greedy answers do not change (tests/measure/test_repeats.py). No deploy
target has this cache, so trials using it are what-ifs (autotune.export.reproduce).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from PIL import Image

# Entries kept: far more than a load test's distinct images, bounded so memory stays flat.
MAX_ENTRIES = 4096


class VisionCache:
    """Wraps a Qwen3-VL model's get_image_features with a per-image LRU cache."""

    def __init__(self, model: Any, *, max_entries: int = MAX_ENTRIES) -> None:
        self.inner = _vision_model(model)
        self.encode: Callable[..., Any] = self.inner.get_image_features
        self.merge = int(self.inner.visual.spatial_merge_size) ** 2
        self.entries: OrderedDict[bytes, tuple[torch.Tensor, list[torch.Tensor]]] = OrderedDict()
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        # Keys of the next call's images, hashed from the images themselves by the engine
        # (cheaper than reading pixel_values back from the GPU); None: hash the tensors.
        self.next_keys: list[bytes] | None = None
        self.inner.get_image_features = self._cached

    def _cached(
        self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor, **kwargs: Any
    ) -> Any:
        rows = image_grid_thw.prod(-1).tolist()
        pieces = torch.split(pixel_values, rows)
        keys, self.next_keys = self.next_keys, None
        if keys is None or len(keys) != len(rows):
            keys = [_key(piece, grid) for piece, grid in zip(pieces, image_grid_thw, strict=True)]
        missing = [i for i, key in enumerate(keys) if key not in self.entries]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            out = self.encode(
                torch.cat([pieces[i] for i in missing]),
                image_grid_thw[missing],
                **{**kwargs, "return_dict": True},
            )
            for n, i in enumerate(missing):
                self.entries[keys[i]] = (
                    out.pooler_output[n],
                    [level[n] for level in out.deepstack_features],
                )
                if len(self.entries) > self.max_entries:
                    self.entries.popitem(last=False)
        else:
            out = None
        embeds, deepstack = [], []
        for key in keys:
            self.entries.move_to_end(key)
            image, levels = self.entries[key]
            embeds.append(image)
            deepstack.append(levels)
        result = out if out is not None else _empty_output()
        result.pooler_output = tuple(embeds)
        result.deepstack_features = [tuple(level) for level in zip(*deepstack, strict=True)]
        return result

    def clear(self) -> None:
        """Forget every image: each trial starts cold, like a fresh server."""
        self.entries.clear()
        self.hits = self.misses = 0


def _vision_model(model: Any) -> Any:
    """The module that owns the vision tower as a child and encodes images with it: the one
    whose forward calls get_image_features (wrappers such as PEFT's only forward attributes)."""
    for module in model.modules():
        if "visual" in module._modules and hasattr(module, "get_image_features"):
            return module
    raise RuntimeError("prefix_cache: this model has no get_image_features with a vision tower")


def _key(piece: torch.Tensor, grid: torch.Tensor) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(piece.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    digest.update(bytes(str(grid.tolist()), "ascii"))
    return digest.digest()


def image_key(image: Image.Image) -> bytes:
    """The cache key of an image as the engine sends it (after resize, fit and mark)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{image.mode}{image.size}".encode("ascii"))
    digest.update(image.tobytes())
    return digest.digest()


def _empty_output() -> Any:
    from transformers.models.qwen3_vl.modeling_qwen3_vl import (
        BaseModelOutputWithDeepstackFeatures,
    )

    return BaseModelOutputWithDeepstackFeatures()
