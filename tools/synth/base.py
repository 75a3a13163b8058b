"""Deterministic generators of synthetic OCR and captioning items.

Every generator takes a `random.Random` and keyword-only knobs (font size, canvas, length …)
and returns a `SynthItem`: an image, the prompt, reference answers, the metric that scores
them, a category and free-form metadata. The same seed gives the same item on any machine:
the fonts travel with the repository (evalsets/fonts/) and no other is used; another Pillow,
FreeType or matplotlib version may still move a few pixels.

The bundled evaluation sets are made by `tools/make_evalset.py` with seeds named
``"<set>/<category>/<index>"``; a training script that imports these generators must use
seeds from another namespace so that no evaluation image is trained on. Prompts are module
constants so training sees exactly the wording the evaluation uses.

Legibility is controlled by `font_px` relative to the canvas: text is rendered small on a
large canvas, so shrinking the image (one model token covers 32x32 pixels) makes small fonts
unreadable first.

This module: the prompts, fonts, random values and text rendering every generator shares.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from tools.synth import vocab

PROMPT_TEXT_LINE = "Read the text in the image. Answer with the text only."
PROMPT_DOCUMENT = "Transcribe all the text in the image, line by line. Answer with the text only."
PROMPT_DOCUMENT_FIELD = 'What is the value of "{key}" in the document? Answer with the value only.'
PROMPT_RECEIPT_TOTAL = "What is the total amount on the receipt? Answer with the number only."
PROMPT_RECEIPT_DATE = "What is the date on the receipt? Answer with the date exactly as printed."
PROMPT_RECEIPT_PHONE = "What is the phone number on the receipt? Answer with the number only."
PROMPT_CHART_VALUE = 'What is the value of the bar labelled "{label}"? Answer with the number only.'
PROMPT_CHART_MAX = "Which category has the highest value in the chart? Answer with its label only."
PROMPT_SHAPE_COUNT = "How many {what} are in the image? Answer with a number."
PROMPT_SHAPE_COLOUR = "What colour is the {shape}? Answer with one word."
PROMPT_SHAPE_SIDE = "Is the {a} to the left or to the right of the {b}? Answer with left or right."
PROMPT_SHAPE_CAPTION = (
    "Describe the image in one sentence, naming the colour and shape of every object."
)
PROMPT_PHOTO = "Describe the image in one sentence."

# The fonts travel with the repository (subsets of Debian's files, tools/synth/subset_fonts.py,
# licences beside them) and are the only ones used: a machine with no system fonts (the GPU
# image) builds a pool, and every machine draws the same glyphs, so the same items.
FONT_DIR = Path(__file__).resolve().parents[2] / "evalsets" / "fonts"
LATIN_FONT_FILES = {
    "dejavu-sans": "DejaVuSans.ttf",
    "dejavu-serif": "DejaVuSerif.ttf",
    "dejavu-mono": "DejaVuSansMono.ttf",
    # Liberation 2.1.5, renamed as its licence asks of a modified font (its names are reserved).
    "liberation-sans": "EvalsetSans-Regular.ttf",
    "liberation-serif": "EvalsetSerif-Regular.ttf",
    "liberation-mono": "EvalsetMono-Regular.ttf",
}
CJK_FONT = FONT_DIR / "wqy-microhei.ttf"

# Letters and digits that no font confuses: 0/O, 1/l/I and 5/S are left out so that a wrong
# answer means the text was illegible, not that the glyphs were ambiguous.
SAFE_CHARS = "ABCDEFGHJKLMNPQRTUVWXYZabcdefghijkmnpqrtuvwxyz2346789"
# The 30 upper-case letters and digits of SAFE_CHARS: what the bundled test model learns to
# read (a tiny model that learned lower case too needed far longer to read anything).
SAFE_UPPER = "ABCDEFGHJKLMNPQRTUVWXYZ2346789"
# Twelve glyphs of SAFE_UPPER that differ in outline even when blurred: the smoke set's lines,
# which the bundled test model learns to read on 2 CPU cores in minutes (issue 28).
SMOKE_GLYPHS = "AEHKMNPTX347"


@dataclass(frozen=True)
class SynthItem:
    """One generated item: everything an evaluation or training record needs."""

    image: Image.Image
    prompt: str
    answers: list[str]
    metric: str
    category: str
    meta: dict[str, Any] = field(default_factory=dict)


def latin_fonts() -> list[str]:
    """Names (keys of `LATIN_FONT_FILES`) of the Latin fonts, all shipped."""
    return list(LATIN_FONT_FILES)


def font_path(name: str) -> Path:
    """The shipped file of a font by name ("cjk" for WenQuanYi Micro Hei)."""
    return CJK_FONT if name == "cjk" else FONT_DIR / LATIN_FONT_FILES[name]


@lru_cache(maxsize=256)
def load_font(name: str, px: int) -> ImageFont.FreeTypeFont:
    """A font by name ("cjk" for WenQuanYi Micro Hei) at a pixel size."""
    path = font_path(name)
    if not path.is_file():
        raise FileNotFoundError(
            f"font {name!r} is missing from this checkout ({path}): restore it with "
            f"git checkout -- {path.parent.name}"
        )
    # Pillow lays text out with libraqm where the machine has it (with FriBiDi), else with its
    # own BASIC layout; the two measure some strings a pixel apart, and line fills and paper
    # widths follow those measures, so one pool drew other items on the GPU image (no raqm).
    # BASIC is in every Pillow: the same items everywhere.
    return ImageFont.truetype(str(path), px, layout_engine=ImageFont.Layout.BASIC)


# --- text content ---------------------------------------------------------------------------


def random_code(rng: random.Random, length: int, alphabet: str = SAFE_CHARS) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


def random_date(rng: random.Random) -> str:
    y, m, d = rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28)
    style = rng.randrange(3)
    if style == 0:
        return f"{y}-{m:02d}-{d:02d}"
    if style == 1:
        return f"{d} {vocab.MONTHS[m - 1]} {y}"
    return f"{m:02d}/{d:02d}/{y}"


def random_id(rng: random.Random) -> str:
    digits = "".join(rng.choice("2346789") for _ in range(rng.randint(4, 6)))
    prefix = "".join(rng.choice("ABCDEFGHJKLMNPRTUVWXYZ") for _ in range(rng.randint(2, 3)))
    return rng.choice(
        (f"{prefix}-{digits}", f"{prefix}{digits}", f"{prefix}-{digits[:2]}-{digits[2:]}")
    )


def random_phone(rng: random.Random) -> str:
    a, b, c = rng.randint(201, 989), rng.randint(200, 989), rng.randint(1000, 9999)
    return rng.choice((f"({a}) {b}-{c}", f"{a}-{b}-{c}"))


def random_words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(vocab.WORDS) for _ in range(n))


def line_text(
    rng: random.Random, content: str, length: int | None = None, alphabet: str = SAFE_CHARS
) -> str:
    """Text for one line: "code" (letters+digits of `alphabet`), "words", "id" or "date"."""
    if content == "code":
        return random_code(rng, length or rng.randint(5, 10), alphabet)
    if content == "words":
        return random_words(rng, length or rng.randint(2, 4))
    if content == "id":
        return random_id(rng)
    if content == "date":
        return random_date(rng)
    raise ValueError(f"unknown line content {content!r}; use code, words, id or date")


# --- rendering ------------------------------------------------------------------------------


def degrade(img: Image.Image, rng: random.Random, *, blur: float, noise: float) -> Image.Image:
    if blur > 0:
        img = img.filter(ImageFilter.GaussianBlur(blur))
    if noise > 0:
        pixels = np.asarray(img, dtype=np.float32)
        grain = np.random.default_rng(rng.getrandbits(64)).normal(0.0, noise, pixels.shape)
        img = Image.fromarray(np.clip(pixels + grain, 0, 255).astype(np.uint8), img.mode)
    return img


def render_text_line(
    text: str,
    *,
    font: ImageFont.FreeTypeFont,
    canvas: tuple[int, int],
    rng: random.Random,
    rotate: float = 0.0,
    ink: int = 0,
    paper: int = 255,
    max_x: int | None = None,
) -> tuple[Image.Image, tuple[int, int]]:
    """Draw `text` at a random place on a grey-level canvas, rotated by `rotate` degrees.

    The text is drawn on its own layer and rotated before pasting, so rotation never pushes
    it off the canvas. `max_x` keeps the left edge within that many pixels of the canvas's
    left (a line that starts near the margin, as printed text does). Returns the image and
    the text's top-left corner.
    """
    left, top, right, bottom = font.getbbox(text)
    pad = max(4, font.size // 4)
    mask = Image.new("L", (right - left + 2 * pad, bottom - top + 2 * pad), 0)
    ImageDraw.Draw(mask).text((pad - left, pad - top), text, font=font, fill=255)
    if rotate:
        mask = mask.rotate(rotate, resample=Image.BICUBIC, expand=True)
    width, height = max(canvas[0], mask.width + 8), max(canvas[1], mask.height + 8)
    right_most = width - mask.width - 4
    x = rng.randint(4, right_most if max_x is None else max(4, min(max_x, right_most)))
    y = rng.randint(4, height - mask.height - 4)
    img = Image.new("L", (width, height), paper)
    img.paste(Image.new("L", mask.size, ink), (x, y), mask)
    return img, (x, y)


def ink_and_paper(rng: random.Random) -> tuple[int, int]:
    return rng.randint(0, 60), rng.randint(215, 255)
