"""Write the bundled evaluation sets from fixed seeds.

Usage (from the repository root)::

    python -m tools.make_evalset                    # evalsets/smoke and evalsets/ocr-caption
    python -m tools.make_evalset smoke --out /tmp/sets

The written files are the ground truth and are committed: FreeType versions render glyphs a
little differently, so tests load the committed images and answers and never regenerate them.
Item ``i`` of category ``c`` in set ``s`` is drawn from ``random.Random("s/c/i")``; a training
script that reuses the generators must use another seed namespace.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path

from autotune.evalset.metrics import METRICS
from tools import synth
from tools.synth import SynthItem

REPO_ROOT = Path(__file__).resolve().parents[1]
CALIBRATION_BEGIN = "<!-- calibration:begin -->"
CALIBRATION_END = "<!-- calibration:end -->"

# (id prefix, category, factory) for every item of a set, in file order; the factory gets the
# item's own seeded Random.
Plan = list[tuple[str, str, Callable[[random.Random], SynthItem]]]


def spread(low: int, high: int, n: int, seed: str) -> list[int]:
    """`n` font sizes evenly covering [low, high], in a seeded random order.

    Even coverage (rather than independent draws) gives every size bucket the same weight in
    the calibration table; the shuffle keeps size independent of content kind.
    """
    sizes = [round(low + (high - low) * i / max(1, n - 1)) for i in range(n)]
    random.Random(seed).shuffle(sizes)
    return sizes


# The smoke set is what the bundled tiny model learns to read on 2 CPU cores
# (tools/train_test_model.py, issues 28 and 38): codes of 2-4 glyphs from a 12-glyph alphabet,
# printed at 24-80 px, one glyph per 64 px cell on a 512 x 64 canvas (32 vision tokens, on the
# grid, so nothing is resampled at full size), and strips of 1-4 coloured shapes of 44-56 px,
# one per cell at four fixed places. A glyph cell covers 2 x 2 vision tokens at full size and
# exactly one at image max side 256 (a quarter of the tokens, and every print size still
# legible); below that the small print goes first: at side 64 the print is 3-10 px and four
# glyphs share a token, at 32 nothing is legible. So the floor has a shrunk side that pays and
# graded drops to reject (issue 38).
SMOKE_CANVAS = (512, 64)
SMOKE_CELL = 64  # one glyph or shape: 2 x 2 vision tokens at full size, one at side 256
SMOKE_FIRST_CELL = 1  # glyph k sits in cell k + 1 of the middle row
SMOKE_LINE_LENGTH = (2, 4)
SMOKE_FONT_PX = (24, 80)
SMOKE_LINE_FONTS = ("dejavu-sans", "dejavu-mono")  # Debian's and matplotlib's: every machine
SMOKE_OBJECT_PX = (44, 56)
SMOKE_SLOT_CELLS = (0, 2, 4, 6)  # a shape strip's four places, a cell apart
SMOKE_ITEMS = {"text_line": 64, "shapes": 16}


def _smoke_line(rng: random.Random, *, font_px: int, length: int | None = None) -> SynthItem:
    return synth.grid_line(
        rng,
        length=length or rng.randint(*SMOKE_LINE_LENGTH),
        font=rng.choice(SMOKE_LINE_FONTS),
        font_px=font_px,
        alphabet=synth.SMOKE_GLYPHS,
        canvas=SMOKE_CANVAS,
        cell=SMOKE_CELL,
        first_cell=SMOKE_FIRST_CELL,
    )


def _smoke_scene(rng: random.Random, *, question: str) -> SynthItem:
    return synth.shapes_row(
        rng,
        question=question,
        canvas=SMOKE_CANVAS,
        cell=SMOKE_CELL,
        slot_cells=SMOKE_SLOT_CELLS,
        n_objects=(1, 4) if question == "count" else (1, 2),
        object_px=SMOKE_OBJECT_PX,
    )


def smoke_plan() -> Plan:
    lines = SMOKE_ITEMS["text_line"]
    plan: Plan = [
        ("line", "text_line", partial(_smoke_line, font_px=px))
        for px in spread(*SMOKE_FONT_PX, lines, "smoke/fonts/text_line")
    ]
    plan += [
        ("shape", "shapes", partial(_smoke_scene, question=q))
        for q in ["count", "colour"] * (SMOKE_ITEMS["shapes"] // 2)
    ]
    return plan


def ocr_caption_plan() -> Plan:
    fonts = {
        name: spread(low, high, n, f"ocr-caption/fonts/{name}")
        for name, low, high, n in (
            ("text_line", 10, 28, 40),
            ("document", 10, 28, 25),
            ("receipt", 10, 28, 20),
            ("chart", 10, 28, 15),
            ("chinese", 12, 28, 25),
        )
    }
    contents = ("code", "words", "id", "date")
    plan: Plan = [
        ("line", "text_line", partial(synth.text_line, content=contents[i % 4], font_px=px))
        for i, px in enumerate(fonts["text_line"])
    ]
    plan += [
        ("doc", "document", partial(synth.document, question=q, font_px=px))
        for q, px in zip(["transcribe"] * 13 + ["field"] * 12, fonts["document"], strict=True)
    ]
    plan += [
        (
            "receipt",
            "receipt",
            partial(synth.receipt, ask=("total", "date", "phone")[i % 3], font_px=px),
        )
        for i, px in enumerate(fonts["receipt"])
    ]
    plan += [
        ("chart", "chart", partial(synth.bar_chart, ask=q, font_px=px))
        for q, px in zip(["value"] * 10 + ["max"] * 5, fonts["chart"], strict=True)
    ]
    plan += [
        (
            "zh",
            "chinese",
            partial(
                synth.chinese_line, mixed=i >= 15, n_chars=(4, 6, 8, 12, 16)[i % 5], font_px=px
            ),
        )
        for i, px in enumerate(fonts["chinese"])
    ]
    questions = ["count"] * 8 + ["colour"] * 7 + ["side"] * 7 + ["caption"] * 8
    plan += [("shape", "shapes", partial(synth.shapes_scene, question=q)) for q in questions]
    plan += [("photo", "photo", partial(_photo, name=name)) for name in synth.PHOTOS]
    return plan


def _photo(rng: random.Random, *, name: str) -> SynthItem:
    return synth.photo(name)  # a fixed picture: the seed has nothing to choose


SETS: dict[str, Callable[[], Plan]] = {"smoke": smoke_plan, "ocr-caption": ocr_caption_plan}


def generate(set_name: str) -> Iterator[tuple[str, SynthItem]]:
    """(item id, item) for every item of a bundled set, deterministically."""
    counters: Counter[str] = Counter()
    for prefix, category, factory in SETS[set_name]():
        index = counters[prefix]
        counters[prefix] += 1
        rng = random.Random(f"{set_name}/{category}/{index}")
        item = factory(rng)
        if item.category != category:
            raise AssertionError(f"{prefix} factory made a {item.category} item")
        yield f"{prefix}-{index + 1:04d}", item


def save_image(item: SynthItem, folder: Path, item_id: str) -> str:
    # Photos compress as JPEG; rendered text and shapes stay lossless PNG, where JPEG's
    # ringing would blur exactly the edges that decide legibility.
    if item.category == "photo":
        name = f"{item_id}.jpg"
        item.image.save(folder / name, quality=90)
    else:
        name = f"{item_id}.png"
        item.image.save(folder / name, optimize=True)
    return f"images/{name}"


def write_set(set_name: str, out_dir: Path) -> dict[str, object]:
    target = out_dir / set_name
    images = target / "images"
    if images.exists():
        shutil.rmtree(images)  # no stale images from an earlier, larger plan
    images.mkdir(parents=True)
    records = []
    for item_id, item in generate(set_name):
        records.append(
            {
                "id": item_id,
                "category": item.category,
                "image": save_image(item, images, item_id),
                "prompt": item.prompt,
                "answers": item.answers,
                "metric": item.metric,
                "meta": {**item.meta, "width": item.image.width, "height": item.image.height},
            }
        )
    with (target / "items.jsonl").open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    readme = target / "README.md"
    old = readme.read_text(encoding="utf-8") if readme.exists() else ""
    readme.write_text(render_readme(set_name, records, target, old), encoding="utf-8")
    return {"set": set_name, "items": len(records), "bytes": folder_bytes(target)}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _calibration_block(set_name: str, old_readme: str) -> str:
    match = re.search(
        f"{re.escape(CALIBRATION_BEGIN)}.*?{re.escape(CALIBRATION_END)}", old_readme, re.S
    )
    if match:
        return match.group(0)  # written by tools/calibrate_evalset.py; keep it
    note = f"Not calibrated yet: run `python -m tools.calibrate_evalset {set_name} --write-readme`."
    return f"{CALIBRATION_BEGIN}\n{note}\n{CALIBRATION_END}"


def _prompt_templates(records: list[dict]) -> list[str]:
    """The synth prompt constants the records use, as `NAME`: "text" lines."""
    used = []
    for name, template in vars(synth.base).items():  # in the order they are defined
        if not name.startswith("PROMPT_"):
            continue
        parts = re.split(r"\{\w+\}", template)
        pattern = re.compile(".+".join(re.escape(part) for part in parts) + "$")
        if any(pattern.match(r["prompt"]) for r in records):
            used.append(f"- `{name}`: {template}")
    return used


def _sizes(records: list[dict], folder: Path) -> str:
    sides = [max(r["meta"]["width"], r["meta"]["height"]) for r in records]
    kinds = Counter(Path(r["image"]).suffix.lstrip(".").upper() for r in records)
    return (
        f"Images: {', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}; longest side "
        f"{min(sides)}-{max(sides)} px; {folder_bytes(folder) / 1e6:.1f} MB in all."
    )


DESCRIPTIONS = {
    "smoke": (
        "A small set for the tiny CPU test model and for fast end-to-end tests: codes of 2-4 "
        "glyphs from a 12-glyph alphabet (upper-case letters and digits, printed at 24-80 px, "
        "one glyph per 64 px cell of a 512 x 64 canvas) and strips of 1-4 coloured shapes "
        "(44-56 px, one per cell at four fixed places) with count and colour questions. A cell "
        "covers 2 x 2 vision tokens at full size and one at image max side 256, where every "
        "print size is still legible; below that the small print goes first (at side 64 it is "
        "3-10 px), and at 32 nothing is legible. So the accuracy floor has a trade-off to find: "
        "smaller images cost fewer vision tokens, one side costs nothing, and the rest cost "
        "accuracy by steps."
    ),
    "ocr-caption": (
        "About 160 items for measuring how a serving configuration (above all the image size "
        "it feeds the model) changes OCR and captioning accuracy. Text is rendered small on "
        "large canvases with a spread of font sizes, so that shrinking the image (one model "
        "token covers 32x32 pixels) makes the smallest fonts illegible first.\n\n"
        "Compare configurations on the same items (paired), per category and overall: with "
        "about 150 pass/fail items near 80% the standard error is about 3 points, so a floor "
        "closer than that to the reference needs a paired test (McNemar on the per-item "
        "pass/fail that each metric's pass threshold defines) or a confidence bound."
    ),
}


def _font_range(records: list[dict]) -> str:
    sizes = [r["meta"]["font_px"] for r in records if "font_px" in r["meta"]]
    return f"{min(sizes)}-{max(sizes)} px" if sizes else "-"


def render_readme(set_name: str, records: list[dict], folder: Path, old_readme: str = "") -> str:
    by_category: dict[str, list[dict]] = {}
    for r in records:
        by_category.setdefault(r["category"], []).append(r)
    rows = []
    for category, recs in by_category.items():
        tasks = Counter(r["meta"].get("task", "-") for r in recs)
        metrics = Counter(r["metric"] for r in recs)
        rows.append(
            f"| {category} | {len(recs)} | "
            + ", ".join(f"{t} {n}" for t, n in tasks.items())
            + " | "
            + ", ".join(f"{m} {n}" for m, n in metrics.items())
            + f" | {_font_range(recs)} |"
        )
    used = sorted({r["metric"] for r in records})
    extra = sorted({m for r in records for m in r["meta"].get("extra_metrics", [])})
    lines = [
        f"# Evaluation set `{set_name}`",
        "",
        DESCRIPTIONS[set_name],
        "",
        f"{len(records)} items in `items.jsonl` (one JSON object a line: id, category, image, "
        "prompt, answers, metric, meta); images in `images/`. Load it with "
        f"`autotune.evalset.dataset.load_evalset({set_name!r})`.",
        "",
        "## Composition",
        "",
        "| category | items | tasks | metric | font sizes |",
        "|---|---|---|---|---|",
        *rows,
        "",
        _sizes(records, folder),
        "",
        "`meta` records how each item was made (font, font_px, rotation, blur, noise, canvas "
        "size, ...). `meta.extra_metrics` names secondary metrics worth reporting beside the "
        "primary one (e.g. 1 - CER beside exact match for text lines).",
        "",
        "## Metrics",
        "",
        *[
            f"- `{m}` (passes at {METRICS[m].pass_threshold:g}): {METRICS[m].description}"
            for m in used
        ],
        *[f"- `{m}` (secondary only): {METRICS[m].description}" for m in extra if m not in used],
        "",
        "## Prompts",
        "",
        "One prompt per task kind, constants in `tools/synth/` (training reuses "
        "them word for word); `{...}` is filled with a field, label or object name:",
        "",
        *_prompt_templates(records),
        "",
        "## How it was made",
        "",
        f"`python -m tools.make_evalset {set_name}` (seeds `{set_name}/<category>/<index>`). "
        "The committed files are the ground truth: another FreeType version renders slightly "
        "different pixels, so never regenerate and compare in tests."
        + (
            " Photos come from scikit-image's `skimage.data` and matplotlib's sample data "
            "(public domain / CC0 per their docstrings), at most 1024 px on the long side."
            if any(r["category"] == "photo" for r in records)
            else ""
        ),
        "",
        "## Legibility calibration",
        "",
        _calibration_block(set_name, old_readme),
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="*", help=f"sets to write: {', '.join(SETS)} (default all)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "evalsets", help="output folder")
    args = parser.parse_args(argv)
    unknown = [name for name in args.sets if name not in SETS]
    if unknown:
        parser.error(f"unknown set {unknown[0]!r}; choose from {', '.join(SETS)}")
    for set_name in args.sets or list(SETS):
        result = write_set(set_name, args.out)
        print(f"{result['set']}: {result['items']} items, {result['bytes'] / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
