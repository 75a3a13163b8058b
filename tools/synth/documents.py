"""Text lines, Chinese lines, documents, receipts and bar charts: the OCR items."""

from __future__ import annotations

import random
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from tools.synth import vocab
from tools.synth.base import (
    PROMPT_CHART_MAX,
    PROMPT_CHART_VALUE,
    PROMPT_DOCUMENT,
    PROMPT_DOCUMENT_FIELD,
    PROMPT_RECEIPT_DATE,
    PROMPT_RECEIPT_PHONE,
    PROMPT_RECEIPT_TOTAL,
    PROMPT_TEXT_LINE,
    SAFE_CHARS,
    SynthItem,
    degrade,
    font_path,
    ink_and_paper,
    latin_fonts,
    line_text,
    load_font,
    random_code,
    random_date,
    random_id,
    random_phone,
    render_text_line,
)


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
    max_x: int | None = None,
) -> SynthItem:
    """One line of Latin text (letters+digits, words, an ID or a date) on a wide canvas.

    `length` counts characters for "code" lines and words for "words" lines. Rotation is up to
    `max_rotate` degrees; half the lines are blurred and about a third get grain. `max_x`
    bounds how far from the left margin the line may start.
    """
    content = content or rng.choice(("code", "words", "id", "date"))
    text = line_text(rng, content, length, alphabet)
    font = font or rng.choice(latin_fonts())
    font_px = font_px or rng.randint(10, 28)
    canvas = canvas or (rng.choice((768, 1024, 1280)), rng.choice((192, 256, 320)))
    rotate = round(rng.uniform(-max_rotate, max_rotate), 2)
    blur = round(rng.uniform(0.2, max_blur), 2) if max_blur > 0.2 and rng.random() < 0.5 else 0.0
    noise = round(rng.uniform(2, max_noise), 1) if max_noise >= 2 and rng.random() < 0.3 else 0.0
    ink, paper = ink_and_paper(rng)
    img, _ = render_text_line(
        text,
        font=load_font(font, font_px),
        canvas=canvas,
        rng=rng,
        rotate=rotate,
        ink=ink,
        paper=paper,
        max_x=max_x,
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
        degrade(img, rng, blur=blur, noise=noise),
        PROMPT_TEXT_LINE,
        [text],
        "exact_match",
        "text_line",
        meta,
    )


def grid_line(
    rng: random.Random,
    *,
    length: int,
    font: str,
    font_px: int,
    alphabet: str,
    canvas: tuple[int, int] = (512, 96),
    cell: int = 32,
    first_cell: int = 1,
) -> SynthItem:
    """A short code printed one glyph per `cell` x `cell` square, as on a display or a plate.

    Glyph k is centred (give or take 2 px) in square k + `first_cell` of the middle row. With
    cells the size of one vision token (32 px), each glyph is one token of its own at full
    size, in the same place from item to item: the tiny test model learns to read that on 2
    CPU cores. Shrunk, several glyphs share a token and blur together.
    """
    text = random_code(rng, length, alphabet)
    ink, paper = ink_and_paper(rng)
    width, height = canvas
    img = Image.new("L", (width, height), paper)
    draw = ImageDraw.Draw(img)
    face = load_font(font, font_px)
    top = (height // cell) // 2 * cell
    for k, glyph in enumerate(text):
        left, upper, right, lower = face.getbbox(glyph)
        x = (first_cell + k) * cell + (cell - (right - left)) / 2 - left + rng.uniform(-2, 2)
        y = top + (cell - (lower - upper)) / 2 - upper + rng.uniform(-2, 2)
        draw.text((x, y), glyph, font=face, fill=ink)
    meta = {
        "task": "line",
        "content": "code",
        "font": font,
        "font_px": font_px,
        "layout": f"one glyph per {cell} px cell from cell {first_cell}",
        "rotate": 0.0,
        "blur": 0.0,
        "noise": 0.0,
        "extra_metrics": ["cer"],
    }
    return SynthItem(img, PROMPT_TEXT_LINE, [text], "exact_match", "text_line", meta)


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
    ink, paper = ink_and_paper(rng)
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
    ink, paper = ink_and_paper(rng)
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
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties

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
    # The shipped font alone, under matplotlib's own defaults: neither another DejaVu on the
    # machine, nor a user's matplotlibrc, nor matplotlib's last-resort font (absent where its
    # fonts are not installed) changes a chart.
    font = FontProperties(fname=font_path("dejavu-sans"), size=points)
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams["font.enable_last_resort"] = False
        fig = Figure(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi)
        canvas = FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        colour = rng.choice(("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"))
        bars = ax.bar(labels, [float(t) for t in texts], color=colour)
        ax.bar_label(bars, labels=texts, fontproperties=font, padding=2)
        title = font.copy()
        title.set_size(points * 1.2)
        ax.set_title(rng.choice(vocab.CHART_TITLES), fontproperties=title)
        for label in ax.get_xticklabels():
            label.set_fontproperties(font)
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
