"""Coloured-shape scenes and photos: the counting, colour, position and caption items."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from tools.synth.base import (
    PROMPT_PHOTO,
    PROMPT_SHAPE_CAPTION,
    PROMPT_SHAPE_COLOUR,
    PROMPT_SHAPE_COUNT,
    PROMPT_SHAPE_SIDE,
    SynthItem,
)

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
    img, meta = _paint(rng, shapes, (canvas, canvas), question)
    return SynthItem(img, posed[0], posed[1], metrics[question], "shapes", meta)


def _paint(
    rng: random.Random, shapes: list[Shape], size: tuple[int, int], question: str
) -> tuple[Image.Image, dict[str, object]]:
    """The scene on a light grey background, and its metadata."""
    scale = 2  # draw at twice the size and shrink, for anti-aliased edges
    shade = rng.randint(225, 255)
    img = Image.new("RGB", (size[0] * scale, size[1] * scale), (shade, shade, shade))
    draw = ImageDraw.Draw(img)
    for s in shapes:
        _draw_shape(draw, s, scale)
    meta = {
        "task": f"shapes_{question}",
        "objects": [s.name for s in shapes],
        "min_object_px": round(min(s.size for s in shapes)),
    }
    return img.resize(size, Image.LANCZOS), meta


def shapes_row(
    rng: random.Random,
    *,
    question: str = "count",
    canvas: tuple[int, int] = (512, 96),
    cell: int = 32,
    slot_cells: tuple[int, ...] = (1, 5, 9, 13),
    n_objects: tuple[int, int] = (1, 4),
    object_px: tuple[int, int] = (22, 28),
) -> SynthItem:
    """A strip of 1-4 coloured shapes, each centred in one `cell` of the middle row.

    The smoke set's scene: a strip costs the vision tokens of a code, not of a square page;
    each shape is one vision token (cell 32 px) at a slot of its own (`slot_cells`, column
    indices), and the question is a count of everything or the colour of a shape that occurs
    once, so a tiny model learns it on the CPU. `meta["cells"]` lists each object's column.
    """
    if question not in ("count", "colour"):
        raise ValueError(f"unknown shapes_row question {question!r}; use count or colour")
    width, height = canvas
    middle = (height // cell) // 2
    for _ in range(1000):
        slots = sorted(rng.sample(slot_cells, k=rng.randint(*n_objects)))
        shapes = [
            Shape(
                rng.choice(sorted(COLOURS)),
                rng.choice(sorted(SHAPES)),
                (column + 0.5) * cell + rng.uniform(-2, 2),
                (middle + 0.5) * cell + rng.uniform(-2, 2),
                rng.uniform(*object_px),
            )
            for column in slots
        ]
        if question == "count":
            n = len(shapes)
            prompt, answers = PROMPT_SHAPE_COUNT.format(what="shapes"), [str(n), NUMBER_WORDS[n]]
            break
        posed = _question(rng, shapes, "colour")
        if posed:
            prompt, answers = posed
            break
    else:
        raise ValueError(f"no strip of {n_objects} objects can pose a {question!r} question")
    img, meta = _paint(rng, shapes, canvas, question)
    meta["cells"] = [middle * (width // cell) + column for column in slots]
    return SynthItem(img, prompt, answers, "exact_match", "shapes", meta)


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
