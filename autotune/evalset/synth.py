"""Deterministic generators of synthetic OCR and captioning items.

Every generator takes a `random.Random` and keyword-only knobs (font size, canvas, length …)
and returns a `SynthItem`: an image, the prompt, reference answers, the metric that scores
them, a category and free-form metadata. The same seed gives the same item on the same
machine (FreeType versions may move a few pixels).

The bundled evaluation sets are made by `tools/make_evalset.py` with seeds named
``"<set>/<category>/<index>"``; a training script that imports these generators must use
seeds from another namespace so that no evaluation image is trained on. Prompts are module
constants so training sees exactly the wording the evaluation uses.

Legibility is controlled by `font_px` relative to the canvas: text is rendered small on a
large canvas, so shrinking the image (one model token covers 32x32 pixels) makes small fonts
unreadable first.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from autotune.evalset import _vocab as vocab

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

FONT_DIRS = (
    Path("/usr/share/fonts/truetype/dejavu"),
    Path("/usr/share/fonts/truetype/liberation2"),
    Path("/usr/share/fonts/truetype/liberation"),
)
# Extra font folders (os.pathsep-separated), searched before FONT_DIRS: machines with no system
# fonts and no package access (GPU boxes) get copies of the same font files there. The same
# files render the same glyphs, and `latin_fonts()` (which the generators draw from) lists a
# font whichever folder holds it, so the generated items do not change.
FONT_DIRS_ENV = "AUTOTUNE_FONT_DIRS"
LATIN_FONT_FILES = {
    "dejavu-sans": "DejaVuSans.ttf",
    "dejavu-serif": "DejaVuSerif.ttf",
    "dejavu-mono": "DejaVuSansMono.ttf",
    "liberation-sans": "LiberationSans-Regular.ttf",
    "liberation-serif": "LiberationSerif-Regular.ttf",
    "liberation-mono": "LiberationMono-Regular.ttf",
}
CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")

# Letters and digits that no font confuses: 0/O, 1/l/I and 5/S are left out so that a wrong
# answer means the text was illegible, not that the glyphs were ambiguous.
SAFE_CHARS = "ABCDEFGHJKLMNPQRTUVWXYZabcdefghijkmnpqrtuvwxyz2346789"
# The 30 upper-case letters and digits of SAFE_CHARS: what the bundled test model learns to
# read (a tiny model that learned lower case too needed far longer to read anything).
SAFE_UPPER = "ABCDEFGHJKLMNPQRTUVWXYZ2346789"


@dataclass(frozen=True)
class SynthItem:
    """One generated item: everything an evaluation or training record needs."""

    image: Image.Image
    prompt: str
    answers: list[str]
    metric: str
    category: str
    meta: dict[str, Any] = field(default_factory=dict)


def _font_dirs() -> tuple[Path, ...]:
    extra = os.environ.get(FONT_DIRS_ENV, "")
    return (*(Path(part) for part in extra.split(os.pathsep) if part), *FONT_DIRS)


def _font_path(file_name: str) -> Path | None:
    for folder in _font_dirs():
        if (folder / file_name).is_file():
            return folder / file_name
    if file_name.startswith("DejaVu"):
        # matplotlib ships DejaVu, so machines without Debian's fonts still render Latin text.
        import matplotlib

        bundled = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / file_name
        if bundled.is_file():
            return bundled
    return None


def latin_fonts() -> list[str]:
    """Names (keys of `LATIN_FONT_FILES`) of the Latin fonts installed here."""
    return [name for name, file in LATIN_FONT_FILES.items() if _font_path(file)]


@lru_cache(maxsize=256)
def load_font(name: str, px: int) -> ImageFont.FreeTypeFont:
    """A font by name ("cjk" for WenQuanYi Micro Hei) at a pixel size."""
    path = CJK_FONT if name == "cjk" else _font_path(LATIN_FONT_FILES[name])
    if path is None or not path.is_file():
        hint = "apt-get install fonts-wqy-microhei" if name == "cjk" else "install the font"
        raise FileNotFoundError(f"font {name!r} is not installed ({hint})")
    return ImageFont.truetype(str(path), px)


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


def _degrade(img: Image.Image, rng: random.Random, *, blur: float, noise: float) -> Image.Image:
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
) -> tuple[Image.Image, tuple[int, int]]:
    """Draw `text` at a random place on a grey-level canvas, rotated by `rotate` degrees.

    The text is drawn on its own layer and rotated before pasting, so rotation never pushes
    it off the canvas. Returns the image and the text's top-left corner.
    """
    left, top, right, bottom = font.getbbox(text)
    pad = max(4, font.size // 4)
    mask = Image.new("L", (right - left + 2 * pad, bottom - top + 2 * pad), 0)
    ImageDraw.Draw(mask).text((pad - left, pad - top), text, font=font, fill=255)
    if rotate:
        mask = mask.rotate(rotate, resample=Image.BICUBIC, expand=True)
    width, height = max(canvas[0], mask.width + 8), max(canvas[1], mask.height + 8)
    x, y = rng.randint(4, width - mask.width - 4), rng.randint(4, height - mask.height - 4)
    img = Image.new("L", (width, height), paper)
    img.paste(Image.new("L", mask.size, ink), (x, y), mask)
    return img, (x, y)


def _ink_and_paper(rng: random.Random) -> tuple[int, int]:
    return rng.randint(0, 60), rng.randint(215, 255)


def text_line(
    rng: random.Random,
    *,
    content: str | None = None,
    length: int | None = None,
    font: str | None = None,
    font_px: int | None = None,
    canvas: tuple[int, int] | None = None,
    max_rotate: float = 2.0,
    max_blur: float = 0.8,
    max_noise: float = 8.0,
    alphabet: str = SAFE_CHARS,
) -> SynthItem:
    """One line of Latin text (letters+digits, words, an ID or a date) on a wide canvas.

    `length` counts characters for "code" lines and words for "words" lines. Rotation is up to
    `max_rotate` degrees; half the lines are blurred and about a third get grain.
    """
    content = content or rng.choice(("code", "words", "id", "date"))
    text = line_text(rng, content, length, alphabet)
    font = font or rng.choice(latin_fonts())
    font_px = font_px or rng.randint(10, 28)
    canvas = canvas or (rng.choice((768, 1024, 1280)), rng.choice((192, 256, 320)))
    rotate = round(rng.uniform(-max_rotate, max_rotate), 2)
    blur = round(rng.uniform(0.2, max_blur), 2) if max_blur > 0.2 and rng.random() < 0.5 else 0.0
    noise = round(rng.uniform(2, max_noise), 1) if max_noise >= 2 and rng.random() < 0.3 else 0.0
    ink, paper = _ink_and_paper(rng)
    img, _ = render_text_line(
        text,
        font=load_font(font, font_px),
        canvas=canvas,
        rng=rng,
        rotate=rotate,
        ink=ink,
        paper=paper,
    )
    meta = {
        "task": "line",
        "content": content,
        "font": font,
        "font_px": font_px,
        "rotate": rotate,
        "blur": blur,
        "noise": noise,
        "extra_metrics": ["cer"],
    }
    return SynthItem(
        _degrade(img, rng, blur=blur, noise=noise),
        PROMPT_TEXT_LINE,
        [text],
        "exact_match",
        "text_line",
        meta,
    )


def chinese_line(
    rng: random.Random,
    *,
    mixed: bool = False,
    n_chars: int | None = None,
    font_px: int | None = None,
    canvas: tuple[int, int] | None = None,
    max_rotate: float = 1.5,
) -> SynthItem:
    """A simplified-Chinese line, or with `mixed` one that mixes Chinese, Latin and numbers.

    Short lines (8 characters or fewer) are scored by exact match, longer ones by character
    error rate; the other metric is recorded in ``meta["extra_metrics"]``.
    """
    if mixed:
        template = rng.choice(vocab.MIXED_TEMPLATES)
        text = template.format(
            w=rng.choice(vocab.CHINESE_WORDS),
            code=random_code(rng, rng.randint(4, 6)),
            num=f"{rng.randint(2, 999)}.{rng.randint(0, 99):02d}",
            date=random_date(rng),
            phone=random_phone(rng),
            n=rng.randint(2, 99),
        )
    else:
        target = n_chars or rng.randint(4, 16)
        text = ""
        while len(text) < target:
            text += rng.choice(vocab.CHINESE_WORDS)
    font_px = font_px or rng.randint(12, 28)
    canvas = canvas or (rng.choice((1024, 1280)), rng.choice((256, 320)))
    rotate = round(rng.uniform(-max_rotate, max_rotate), 2)
    ink, paper = _ink_and_paper(rng)
    img, _ = render_text_line(
        text,
        font=load_font("cjk", font_px),
        canvas=canvas,
        rng=rng,
        rotate=rotate,
        ink=ink,
        paper=paper,
    )
    short = len(text.replace(" ", "")) <= 8
    metric, extra = ("exact_match", "cer") if short else ("cer", "exact_match")
    meta = {
        "task": "line",
        "lang": "mixed" if mixed else "zh",
        "font": "wqy-microhei",
        "font_px": font_px,
        "rotate": rotate,
        "extra_metrics": [extra],
    }
    return SynthItem(img, PROMPT_TEXT_LINE, [text], metric, "chinese", meta)


# --- documents and receipts -----------------------------------------------------------------


def _field_value(rng: random.Random, key: str) -> str:
    kind = vocab.DOCUMENT_FIELDS[key]
    if kind == "id":
        return random_id(rng)
    if kind == "date":
        return random_date(rng)
    if kind == "phone":
        return random_phone(rng)
    if kind == "name":
        return f"{rng.choice(vocab.FIRST_NAMES)} {rng.choice(vocab.LAST_NAMES)}"
    if kind == "city":
        return rng.choice(vocab.CITIES)
    if kind == "money":
        return f"${rng.randint(10, 9999):,}.{rng.randint(0, 99):02d}"
    return random_code(rng, rng.randint(6, 9))


def _draw_page(
    lines: list[str],
    *,
    size: tuple[int, int],
    font: ImageFont.FreeTypeFont,
    margin: int,
    ink: int,
    paper: int,
    spacing: float = 1.5,
) -> Image.Image:
    img = Image.new("L", size, paper)
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((margin, margin + round(i * font.size * spacing)), line, font=font, fill=ink)
    return img


def document(
    rng: random.Random,
    *,
    question: str = "transcribe",
    n_lines: int | None = None,
    font: str | None = None,
    font_px: int | None = None,
    page: tuple[int, int] | None = None,
) -> SynthItem:
    """A page of 5-15 lines: a title, "Key: value" fields and prose.

    `question` "transcribe" asks for the whole text (token F1, CER recorded as extra);
    "field" asks for one field's value (ANLS).
    """
    if question not in ("transcribe", "field"):
        raise ValueError(f"unknown document question {question!r}; use transcribe or field")
    n_lines = n_lines or rng.randint(5, 15)
    font = font or rng.choice(latin_fonts())
    font_px = font_px or rng.randint(10, 28)
    page = page or (rng.randint(1000, 1300), rng.randint(1200, 1600))
    face = load_font(font, font_px)
    margin = rng.randint(60, 120)
    keys = rng.sample(
        sorted(vocab.DOCUMENT_FIELDS), k=min(len(vocab.DOCUMENT_FIELDS), rng.randint(3, 6))
    )
    fields = {key: _field_value(rng, key) for key in keys}
    lines = [rng.choice(vocab.DOCUMENT_TITLES)] + [f"{k}: {v}" for k, v in fields.items()]
    while len(lines) < n_lines:
        words: list[str] = []
        while face.getlength(" ".join(words)) < (page[0] - 2 * margin) * rng.uniform(0.5, 0.9):
            words.append(rng.choice(vocab.WORDS))
        lines.append(" ".join(words[:-1]) if len(words) > 1 else words[0])
    lines = lines[:n_lines]
    ink, paper = _ink_and_paper(rng)
    img = _draw_page(lines, size=page, font=face, margin=margin, ink=ink, paper=paper)
    meta: dict[str, Any] = {
        "task": "transcribe" if question == "transcribe" else "field",
        "font": font,
        "font_px": font_px,
        "n_lines": len(lines),
        "fields": fields,
    }
    if question == "transcribe":
        meta["extra_metrics"] = ["cer"]
        return SynthItem(img, PROMPT_DOCUMENT, ["\n".join(lines)], "token_f1", "document", meta)
    key = rng.choice(keys)
    meta["key"] = key
    return SynthItem(
        img, PROMPT_DOCUMENT_FIELD.format(key=key), [fields[key]], "anls", "document", meta
    )


def _money(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,}"


def receipt(
    rng: random.Random,
    *,
    ask: str = "total",
    font_px: int | None = None,
    canvas: tuple[int, int] | None = None,
) -> SynthItem:
    """A till receipt whose line items, tax and total add up, on a grey background.

    `ask` is "total", "date" or "phone".
    """
    prompts = {
        "total": PROMPT_RECEIPT_TOTAL,
        "date": PROMPT_RECEIPT_DATE,
        "phone": PROMPT_RECEIPT_PHONE,
    }
    if ask not in prompts:
        raise ValueError(f"unknown receipt question {ask!r}; use total, date or phone")
    font_px = font_px or rng.randint(10, 28)
    width = 36  # characters per line, in a monospaced font
    date, phone = random_date(rng), random_phone(rng)
    lines = [
        rng.choice(vocab.STORES).center(width),
        f"Tel {phone}".center(width),
        f"Date {date}  {rng.randint(7, 21):02d}:{rng.randint(0, 59):02d}",
        "-" * width,
    ]
    subtotal = Decimal(0)
    for name in rng.sample(vocab.GROCERIES, k=rng.randint(3, 7)):
        qty = rng.randint(1, 4)
        price = Decimal(rng.randint(49, 2499)) / 100
        subtotal += qty * price
        left = f"{name} {qty}x{_money(price)}"
        lines.append(f"{left}{_money(qty * price):>{width - len(left)}}")
    rate = Decimal(rng.choice((5, 6, 7, 8, 10)))
    tax = (subtotal * rate / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    total = subtotal + tax
    for label, value in (("Subtotal", subtotal), (f"Tax {rate}%", tax), ("TOTAL", total)):
        lines.append(f"{label}{_money(value):>{width - len(label)}}")
    lines += ["-" * width, "Thank you!".center(width)]
    face = load_font(rng.choice([f for f in latin_fonts() if f.endswith("mono")]), font_px)
    margin = font_px * 2
    paper_size = (
        round(face.getlength("M" * width)) + 2 * margin,
        round(len(lines) * font_px * 1.4) + 2 * margin,
    )
    canvas = canvas or (max(1000, paper_size[0] + 80), max(1200, paper_size[1] + 80))
    paper = _draw_page(
        lines,
        size=paper_size,
        font=face,
        margin=margin,
        ink=rng.randint(0, 60),
        paper=rng.randint(230, 255),
        spacing=1.4,
    )
    img = Image.new("L", canvas, rng.randint(90, 170))
    img.paste(
        paper,
        (
            rng.randint(20, canvas[0] - paper_size[0] - 20),
            rng.randint(20, canvas[1] - paper_size[1] - 20),
        ),
    )
    answer = {"total": _money(total), "date": date, "phone": phone}[ask]
    meta = {
        "task": f"receipt_{ask}",
        "font_px": font_px,
        "total": str(total),
        "tax_rate": str(rate),
        "lines": [line.strip() for line in lines],  # the printed text, for transcription
    }
    return SynthItem(img, prompts[ask], [answer], "numeric_exact", "receipt", meta)


# --- charts ---------------------------------------------------------------------------------


def bar_chart(
    rng: random.Random,
    *,
    ask: str = "value",
    n_bars: int | None = None,
    font_px: int | None = None,
    size: tuple[int, int] | None = None,
) -> SynthItem:
    """A bar chart with a value label on every bar (matplotlib, no pyplot state).

    `ask` "value" asks for one bar's value (relaxed accuracy), "max" for the label of the
    highest bar (exact match). `font_px` sets every text in the chart, labels included.
    """
    if ask not in ("value", "max"):
        raise ValueError(f"unknown chart question {ask!r}; use value or max")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n_bars = n_bars or rng.randint(4, 7)
    font_px = font_px or rng.randint(10, 28)
    size = size or (rng.randint(1000, 1400), rng.randint(700, 1000))
    labels = rng.sample(rng.choice(vocab.CHART_LABELS), k=n_bars)
    decimals = rng.random() < 0.4
    scale = rng.choice((100, 1000))
    values = rng.sample(range(scale // 10, scale), k=n_bars)
    texts = [f"{v / 10:.1f}" if decimals else str(v) for v in values]
    dpi = 100
    points = font_px * 72 / dpi  # matplotlib sizes text in points
    fig = Figure(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colour = rng.choice(("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"))
    bars = ax.bar(labels, [float(t) for t in texts], color=colour)
    ax.bar_label(bars, labels=texts, fontsize=points, padding=2)
    ax.set_title(rng.choice(vocab.CHART_TITLES), fontsize=points * 1.2)
    ax.tick_params(labelsize=points)
    # No y axis: the value labels are the only way to read a value, so the question tests
    # reading, not estimating bar heights.
    ax.yaxis.set_visible(False)
    for side in ("left", "top", "right"):
        ax.spines[side].set_visible(False)
    ax.margins(y=0.15)
    fig.tight_layout()
    canvas.draw()
    img = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba()).convert("RGB")
    meta = {
        "task": f"chart_{ask}",
        "font_px": font_px,
        "values": dict(zip(labels, texts, strict=True)),
    }
    if ask == "value":
        i = rng.randrange(n_bars)
        return SynthItem(
            img,
            PROMPT_CHART_VALUE.format(label=labels[i]),
            [texts[i]],
            "relaxed_accuracy",
            "chart",
            meta,
        )
    top = labels[max(range(n_bars), key=lambda j: values[j])]
    return SynthItem(img, PROMPT_CHART_MAX, [top], "exact_match", "chart", meta)


# --- coloured shapes ------------------------------------------------------------------------

COLOURS: dict[str, tuple[tuple[int, int, int], str]] = {
    # name: (RGB, alternatives a model may use for it)
    "red": ((215, 38, 38), "red"),
    "green": ((40, 160, 60), "green"),
    "blue": ((35, 85, 220), "blue"),
    "yellow": ((245, 205, 25), "yellow"),
    "orange": ((245, 130, 20), "orange"),
    "purple": ((135, 55, 180), "purple|violet"),
}
SHAPES: dict[str, str] = {
    "circle": "circle|disc|disk|dot",
    "square": "square|box",
    "triangle": "triangle",
    "star": "star",
}
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


@dataclass(frozen=True)
class Shape:
    colour: str
    shape: str
    x: float  # centre, pixels
    y: float
    size: float  # width of the bounding box, pixels

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"


def _draw_shape(draw: ImageDraw.ImageDraw, s: Shape, scale: int) -> None:
    x, y, r = s.x * scale, s.y * scale, s.size * scale / 2
    fill = COLOURS[s.colour][0]
    if s.shape == "circle":
        draw.ellipse((x - r, y - r, x + r, y + r), fill=fill)
    elif s.shape == "square":
        draw.rectangle((x - r * 0.9, y - r * 0.9, x + r * 0.9, y + r * 0.9), fill=fill)
    elif s.shape == "triangle":
        draw.polygon([(x, y - r), (x + r, y + r * 0.8), (x - r, y + r * 0.8)], fill=fill)
    else:
        star = [
            (
                x + (r if k % 2 == 0 else r * 0.45) * np.sin(k * np.pi / 5),
                y - (r if k % 2 == 0 else r * 0.45) * np.cos(k * np.pi / 5),
            )
            for k in range(10)
        ]
        draw.polygon(star, fill=fill)


def _scene(
    rng: random.Random,
    *,
    canvas: int,
    grid: int,
    n_objects: int,
    object_px: tuple[int, int] | None = None,
) -> list[Shape]:
    cell = canvas / grid
    cells = rng.sample(range(grid * grid), k=n_objects)
    shapes = []
    for c in cells:
        size = rng.uniform(*object_px) if object_px else cell * rng.uniform(0.45, 0.75)
        slack = (cell - size) / 2
        shapes.append(
            Shape(
                rng.choice(sorted(COLOURS)),
                rng.choice(sorted(SHAPES)),
                (c % grid + 0.5) * cell + rng.uniform(-slack, slack),
                (c // grid + 0.5) * cell + rng.uniform(-slack, slack),
                size,
            )
        )
    return shapes


def _question(
    rng: random.Random, shapes: list[Shape], question: str
) -> tuple[str, list[str]] | None:
    """The prompt and answers for a scene, or None when the scene cannot pose the question."""
    names = [s.name for s in shapes]
    if question == "count":
        # Count everything, one shape or one colour: the totals reach 8, the others stay small.
        pick, by = rng.choice(shapes), rng.choice(("all", "shape", "colour"))
        n = sum(
            by == "all" or (s.shape == pick.shape if by == "shape" else s.colour == pick.colour)
            for s in shapes
        )
        what = {"all": "shapes", "shape": f"{pick.shape}s", "colour": f"{pick.colour} shapes"}[by]
        return PROMPT_SHAPE_COUNT.format(what=what), [str(n), NUMBER_WORDS[n]]
    if question == "colour":
        single = [s for s in shapes if [t.shape for t in shapes].count(s.shape) == 1]
        if not single:
            return None
        pick = rng.choice(single)
        return PROMPT_SHAPE_COLOUR.format(shape=pick.shape), COLOURS[pick.colour][1].split("|")
    if question == "side":
        unique = [s for s in shapes if names.count(s.name) == 1]
        pairs = [(a, b) for a in unique for b in unique if abs(a.x - b.x) > a.size]
        if not pairs:
            return None
        a, b = rng.choice(pairs)
        return PROMPT_SHAPE_SIDE.format(a=a.name, b=b.name), ["left" if a.x < b.x else "right"]
    facts = sorted({(s.colour, s.shape) for s in shapes})
    return PROMPT_SHAPE_CAPTION, [f"{COLOURS[c][1]} {SHAPES[s]}" for c, s in facts]


def shapes_scene(
    rng: random.Random,
    *,
    question: str = "count",
    canvas: int | None = None,
    grid: int | None = None,
    n_objects: int | None = None,
    object_px: tuple[int, int] | None = None,
) -> SynthItem:
    """Coloured shapes on a grid, with a count, colour, left/right or caption question.

    Objects fill half to three quarters of their grid cell, or measure `object_px` (low,
    high) pixels across: small objects that vanish when the image is shrunk far enough.
    """
    metrics = {
        "count": "exact_match",
        "colour": "exact_match",
        "side": "exact_match",
        "caption": "fact_recall",
    }
    if question not in metrics:
        raise ValueError(f"unknown shapes question {question!r}; use {', '.join(metrics)}")
    canvas = canvas or rng.choice((512, 640, 768))
    grid = grid or rng.choice((3, 4))
    for _ in range(1000):
        n = n_objects or rng.randint(3, min(8, grid * grid - 1))
        shapes = _scene(rng, canvas=canvas, grid=grid, n_objects=n, object_px=object_px)
        posed = _question(rng, shapes, question)
        if posed:
            break
    else:
        raise ValueError(f"no scene of {n_objects} objects can pose a {question!r} question")
    scale = 2  # draw at twice the size and shrink, for anti-aliased edges
    shade = rng.randint(225, 255)
    img = Image.new("RGB", (canvas * scale, canvas * scale), (shade, shade, shade))
    draw = ImageDraw.Draw(img)
    for s in shapes:
        _draw_shape(draw, s, scale)
    img = img.resize((canvas, canvas), Image.LANCZOS)
    meta = {
        "task": f"shapes_{question}",
        "objects": [s.name for s in shapes],
        "min_object_px": round(min(s.size for s in shapes)),
    }
    return SynthItem(img, posed[0], posed[1], metrics[question], "shapes", meta)


# --- real photos ----------------------------------------------------------------------------

# name: (where it comes from, keyword references). All are public domain or CC0 per the
# docstrings of skimage.data, or shipped by matplotlib as sample data.
PHOTOS: dict[str, tuple[str, tuple[str, ...]]] = {
    "astronaut": ("skimage", ("astronaut|spacesuit|space suit|nasa",)),
    "chelsea": ("skimage", ("cat|kitten|tabby",)),
    "coffee": ("skimage", ("coffee|cup|mug|cappuccino|latte|espresso",)),
    "rocket": ("skimage", ("rocket|spacecraft|launch|shuttle",)),
    "camera": ("skimage", ("man|person|photographer|cameraman", "camera|tripod")),
    "coins": ("skimage", ("coin",)),
    "hubble_deep_field": ("skimage", ("galaxy|galaxies|space|star|universe|nebula|cosmos",)),
    "stereo_motorcycle": ("skimage", ("motorcycle|motorbike|bike|scooter",)),
    "grace_hopper": ("matplotlib", ("woman|lady|officer|person", "uniform|navy|military")),
}


def _photo_pixels(name: str) -> Image.Image:
    source, _ = PHOTOS[name]
    if source == "matplotlib":
        import matplotlib.cbook

        return Image.open(matplotlib.cbook.get_sample_data(f"{name}.jpg", asfileobj=False))
    try:
        import skimage.data
    except ImportError as exc:
        raise ImportError("photos need scikit-image: pip install scikit-image") from exc
    pixels = getattr(skimage.data, name)()
    if isinstance(pixels, tuple):  # stereo_motorcycle returns (left, right, disparity)
        pixels = pixels[0]
    return Image.fromarray(np.asarray(pixels))


def photo(name: str, *, max_side: int = 1024) -> SynthItem:
    """A real photo from scikit-image or matplotlib, with keyword references."""
    if name not in PHOTOS:
        raise ValueError(f"unknown photo {name!r}; available: {', '.join(PHOTOS)}")
    img = _photo_pixels(name).convert("RGB")
    if max(img.size) > max_side:
        img.thumbnail((max_side, max_side), Image.LANCZOS)
    return SynthItem(
        img,
        PROMPT_PHOTO,
        list(PHOTOS[name][1]),
        "keyword_recall",
        "photo",
        {"task": "photo", "source": PHOTOS[name][0], "photo": name},
    )


# Generators that need only a Random, for callers that sample kinds (training).
GENERATORS = {
    "text_line": text_line,
    "chinese_line": chinese_line,
    "document": document,
    "receipt": receipt,
    "bar_chart": bar_chart,
    "shapes_scene": shapes_scene,
}
