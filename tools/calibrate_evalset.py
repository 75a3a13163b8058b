"""Check at which downscale each OCR item of a set stops being legible, using tesseract.

Usage (from the repository root; needs Debian's tesseract-ocr, -eng and -chi-sim)::

    python -m tools.calibrate_evalset ocr-caption                 # print the table
    python -m tools.calibrate_evalset ocr-caption --write-readme  # and put it in README.md
    python -m tools.calibrate_evalset smoke --sides 0,256,128,64 --write-readme

Every item that has a ``font_px`` (text lines, documents, receipts, charts, Chinese) is shrunk
with LANCZOS to 1, 1/2, 1/4, ... of its pixel area (or, with --sides, to the image max sides a
space searches, as autotune's client resizes), then enlarged back to twice its original size
before OCR: the enlargement adds no detail, it only keeps tesseract's own minimum glyph
height from counting as illegibility. Tesseract is a proxy for the model: the point is that
each font-size bucket loses legibility somewhere in the range the tuner explores.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

from PIL import Image
from rapidfuzz import fuzz

from autotune.evalset.dataset import EvalItem, load_evalset
from autotune.evalset.images import resize_to_max_side
from autotune.evalset.metrics import cer, normalize
from tools.make_evalset import CALIBRATION_BEGIN, CALIBRATION_END

AREAS = tuple(Fraction(1, 2**k) for k in range(6))  # full size down to 1/32
BUCKETS = ((10, 12), (13, 15), (16, 19), (20, 23), (24, 28), (29, 36), (37, 48))
# Whole-text items count as legible at 1 - CER >= 0.8; question items when the answer appears
# in the OCR output with at most about one character in ten wrong.
LINE_CER_PASS = 0.8
ANSWER_MATCH_PASS = 90.0


def _psm_and_lang(item: EvalItem) -> tuple[str, str]:
    task = item.meta.get("task", "")
    lang = "chi_sim+eng" if item.category == "chinese" else "eng"
    if task == "line":
        return "7", lang  # a single text line
    if task.startswith("chart"):
        return "11", lang  # sparse text scattered over a figure
    return "6", lang  # a uniform block of text


def ocr(img: Image.Image, *, psm: str, lang: str) -> str:
    buffer = io.BytesIO()
    img.save(buffer, format="PNG")
    # One OpenMP thread per tesseract: the parallelism comes from running many at once.
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    done = subprocess.run(
        ["tesseract", "stdin", "stdout", "--psm", psm, "-l", lang],
        input=buffer.getvalue(),
        capture_output=True,
        timeout=300,
        env=env,
        check=False,
    )
    return done.stdout.decode("utf-8", errors="replace")


Step = Fraction | int  # a share of the pixel area, or an image max side in pixels (0: full)


def shrink(img: Image.Image, step: Step) -> Image.Image:
    if isinstance(step, Fraction):
        scale = float(step) ** 0.5
        small = img.resize(
            (max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.LANCZOS
        )
    else:  # an image max side (0: full size), as autotune's client resizes
        small = resize_to_max_side(img, step or None)
    return small.resize((img.width * 2, img.height * 2), Image.LANCZOS)


def legible(item: EvalItem, text: str) -> bool:
    # Whitespace is ignored: tesseract puts spaces around hyphens in monospaced IDs and
    # between Chinese characters, which says nothing about legibility.
    text = _squeeze(text)
    answers = [_squeeze(a) for a in item.answers]
    if item.meta.get("task") in ("line", "transcribe"):
        return cer(text, answers) >= LINE_CER_PASS
    return any(fuzz.partial_ratio(a, text) >= ANSWER_MATCH_PASS for a in answers)


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", "", normalize(text))


def check(item: EvalItem, step: Step) -> bool:
    psm, lang = _psm_and_lang(item)
    with Image.open(item.image_path) as img:
        pixels = img.convert("L")
    return legible(item, ocr(shrink(pixels, step), psm=psm, lang=lang))


def bucket_of(font_px: int) -> str:
    for low, high in BUCKETS:
        if low <= font_px <= high:
            return f"{low}-{high}"
    return f"<{BUCKETS[0][0]}" if font_px < BUCKETS[0][0] else f">{BUCKETS[-1][1]}"


def calibrate(set_name: str, *, areas: Sequence[Step], jobs: int) -> dict[str, dict]:
    """item id -> {"bucket", "category", "detail", "legible": [bool per area]}."""
    items = [i for i in load_evalset(set_name).items if "font_px" in i.meta]
    tasks = [(item, area) for item in items for area in areas]
    with ThreadPoolExecutor(jobs) as pool:
        outcomes = list(pool.map(lambda t: check(*t), tasks))
    results: dict[str, dict] = {}
    for (item, _), ok in zip(tasks, outcomes, strict=True):
        entry = results.setdefault(
            item.id,
            {
                "bucket": bucket_of(item.meta["font_px"]),
                "category": item.category,
                "detail": ", ".join(
                    f"{k} {item.meta[k]}"
                    for k in ("font", "font_px", "blur", "noise")
                    if item.meta.get(k)
                ),
                "legible": [],
            },
        )
        entry["legible"].append(ok)
    return results


def _step_label(step: Step) -> str:
    if isinstance(step, Fraction):
        return f"{step} area"
    return f"side {step}" if step else "full size"


def _table(groups: dict[str, list[list[bool]]], label: str, areas: Sequence[Step]) -> list[str]:
    header = f"| {label} | items | " + " | ".join(_step_label(a) for a in areas) + " |"
    lines = [header, "|---|---|" + "---|" * len(areas)]
    for name, rows in groups.items():
        cells = [f"{sum(r[k] for r in rows) / len(rows):.0%}" for k in range(len(areas))]
        lines.append(f"| {name} | {len(rows)} | " + " | ".join(cells) + " |")
    return lines


def render(results: dict[str, dict], areas: Sequence[Step], set_name: str) -> str:
    by_bucket: dict[str, list[list[bool]]] = defaultdict(list)
    by_category: dict[str, list[list[bool]]] = defaultdict(list)
    for entry in results.values():
        by_bucket[entry["bucket"]].append(entry["legible"])
        by_category[entry["category"]].append(entry["legible"])
    order = [f"<{BUCKETS[0][0]}", *(f"{lo}-{hi}" for lo, hi in BUCKETS), f">{BUCKETS[-1][1]}"]
    by_bucket = dict(sorted(by_bucket.items(), key=lambda kv: order.index(kv[0])))
    unread = sorted(item_id for item_id, e in results.items() if not e["legible"][0])
    version = subprocess.run(["tesseract", "--version"], capture_output=True, text=True).stdout
    sides = not isinstance(areas[0], Fraction)
    how = (
        "image max side (shrunk as autotune's client does: LANCZOS, never enlarged)"
        if sides
        else "share of the original pixel area (each halving shrinks the sides by 0.71)"
    )
    option = f" --sides {','.join(str(a) for a in areas)}" if sides else ""
    lines = [
        f"Fraction of OCR items that tesseract ({version.splitlines()[0]}) reads at each {how}, "
        "by rendered font size. "
        f"Legible: 1 - CER >= {LINE_CER_PASS} for lines and transcriptions; the answer found "
        f"in the OCR text (fuzzy partial match >= {ANSWER_MATCH_PASS:g}) for questions. "
        f"Regenerate with `python -m tools.calibrate_evalset {set_name}{option} "
        "--write-readme`.",
        "",
        *_table(by_bucket, "font px", areas),
        "",
        *_table(dict(sorted(by_category.items())), "category", areas),
        "",
        (
            f"Not read by tesseract at full size ({len(unread)}): "
            + "; ".join(f"{i} ({results[i]['detail']})" for i in unread)
            + ". Tesseract is weaker than a VLM on small, blurred or noisy text: look at "
            "these by eye before trusting the set."
            if unread
            else "Every item is legible to tesseract at full size."
        ),
    ]
    return "\n".join(lines)


def write_readme(readme: Path, table: str) -> None:
    text = readme.read_text(encoding="utf-8")
    block = f"{CALIBRATION_BEGIN}\n{table}\n{CALIBRATION_END}"
    pattern = re.compile(f"{re.escape(CALIBRATION_BEGIN)}.*?{re.escape(CALIBRATION_END)}", re.S)
    if not pattern.search(text):
        raise SystemExit(f"{readme} has no calibration markers; rerun tools.make_evalset")
    readme.write_text(pattern.sub(lambda _: block, text), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", nargs="?", default="ocr-caption", help="set name or path")
    parser.add_argument(
        "--areas",
        default=",".join(str(a) for a in AREAS),
        help="comma-separated shares of the pixel area, e.g. 1,1/2,1/4",
    )
    parser.add_argument(
        "--sides",
        default=None,
        help="comma-separated image max sides instead of areas (0: full size), e.g. 0,256,64",
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    parser.add_argument("--write-readme", action="store_true", help="update the set's README.md")
    parser.add_argument("--items", action="store_true", help="also print one line per item")
    args = parser.parse_args(argv)
    if shutil.which("tesseract") is None:
        parser.error(
            "tesseract not found: apt-get install tesseract-ocr tesseract-ocr-eng "
            "tesseract-ocr-chi-sim"
        )
    areas: list[Step] = (
        [int(side) for side in args.sides.split(",")]
        if args.sides
        else [Fraction(a) for a in args.areas.split(",")]
    )
    results = calibrate(args.set, areas=areas, jobs=args.jobs)
    if args.items:
        for item_id, e in results.items():
            marks = "".join("+" if ok else "." for ok in e["legible"])
            print(f"{item_id:14} {e['category']:10} {e['bucket']:6} {marks}")
    table = render(results, areas, args.set)
    print(table)
    if args.write_readme:
        write_readme(load_evalset(args.set).path.parent / "README.md", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
