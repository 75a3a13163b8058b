"""How a Qwen3-VL checkpoint's processor sizes images: the grid and the pixel bounds.

Engines resize every image onto a grid of `factor` pixels (patch size x spatial merge) with at
least `min_pixels` and at most `max_pixels`. Their defaults differ (ms-swift's minimum is 4
tokens, the checkpoint's 64), so the same image can reach the model at different sizes. The
geometry is read once from the checkpoint and pinned in every command autotune exports.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from PIL import Image


@dataclass(frozen=True)
class ImageGeometry:
    factor: int = 32
    min_pixels: int = 65_536
    max_pixels: int = 16_777_216

    @property
    def min_tokens(self) -> int:
        return self.min_pixels // self.factor**2

    @property
    def max_tokens(self) -> int:
        return self.max_pixels // self.factor**2

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ImageGeometry:
        return cls(**{k: int(v) for k, v in (data or {}).items() if k in cls.__annotations__})

    def grid_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) on the grid within the pixel bounds, aspect ratio kept as closely
        as the grid allows: the rule Qwen's image processors and qwen-vl-utils apply."""
        f = self.factor
        h_bar = max(f, round(height / f) * f)
        w_bar = max(f, round(width / f) * f)
        if h_bar * w_bar > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h_bar = max(f, math.floor(height / beta / f) * f)
            w_bar = max(f, math.floor(width / beta / f) * f)
        elif h_bar * w_bar < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h_bar = math.ceil(height * beta / f) * f
            w_bar = math.ceil(width * beta / f) * f
        return w_bar, h_bar

    def fit(self, image: Image.Image) -> Image.Image:
        """The image at its grid size, resized as qwen-vl-utils (and so ms-swift) does it:
        RGB on white, one bicubic PIL resize. An image already on the grid is not touched, so
        a processor given the result resizes nothing and every engine sees the same pixels."""
        if image.mode == "RGBA":
            background = Image.new("RGB", image.size, (255, 255, 255))
            background.paste(image, mask=image.split()[3])
            image = background
        elif image.mode != "RGB":
            image = image.convert("RGB")
        size = self.grid_size(image.width, image.height)
        return image if size == image.size else image.resize(size, Image.Resampling.BICUBIC)


DEFAULT_GEOMETRY = ImageGeometry()


def read_geometry(checkpoint: str | Path) -> ImageGeometry:
    """The geometry in a checkpoint folder's preprocessor_config.json; Qwen3-VL's defaults
    when the folder or the file is missing (a hub id not downloaded here)."""
    path = Path(checkpoint) / "preprocessor_config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return DEFAULT_GEOMETRY
    size = data.get("size") or {}
    factor = int(data.get("patch_size", 16)) * int(data.get("merge_size", 2))
    return ImageGeometry(
        factor=factor,
        min_pixels=int(size.get("shortest_edge", data.get("min_pixels", 65_536))),
        max_pixels=int(size.get("longest_edge", data.get("max_pixels", 16_777_216))),
    )
