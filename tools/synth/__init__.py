"""Deterministic generators of synthetic OCR and captioning items (tools only: the bundled
evaluation sets are made with them by tools/make_evalset.py, and tools/train_data.py trains the
test model on fresh ones). `base` holds the prompts, fonts and text rendering; `documents` the OCR
items; `scenes` the shapes and photos."""

from __future__ import annotations

from tools.synth import base  # noqa: F401  (make_evalset lists its prompts in definition order)
from tools.synth.base import (
    CJK_FONT,
    PROMPT_TEXT_LINE,
    SAFE_CHARS,
    SAFE_UPPER,
    SMOKE_GLYPHS,
    SynthItem,
)
from tools.synth.documents import (
    bar_chart,
    chinese_line,
    document,
    grid_line,
    receipt,
    text_line,
)
from tools.synth.scenes import PHOTOS, photo, shapes_row, shapes_scene

# Generators that need only a Random, for callers that sample kinds (training).
GENERATORS = {
    "text_line": text_line,
    "chinese_line": chinese_line,
    "document": document,
    "receipt": receipt,
    "bar_chart": bar_chart,
    "shapes_scene": shapes_scene,
}

__all__ = [
    "CJK_FONT",
    "GENERATORS",
    "PHOTOS",
    "PROMPT_TEXT_LINE",
    "SAFE_CHARS",
    "SAFE_UPPER",
    "SMOKE_GLYPHS",
    "SynthItem",
    "bar_chart",
    "chinese_line",
    "document",
    "grid_line",
    "photo",
    "receipt",
    "shapes_row",
    "shapes_scene",
    "text_line",
]
