"""Write a speed-only evaluation set of full-HD (1920x1080) document images.

Each image tiles pages and charts of the bundled ocr-caption set onto a white 1920x1080
canvas, so it looks like a real screenshot (and compresses like one: a few hundred KB as PNG,
not the ~6 MB of random pixels). Every item has the same size and prompt, so a static-cache
compiled engine sees one shape and compiles once. The answers are placeholders: with dummy
weights nothing is scored.

    python bench/gpu/bench_evalset.py OUT_DIR [--items 8] [--size 1920x1080]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "evalsets" / "ocr-caption"
PROMPT = "Read all the text in the image and describe the chart."


def _sources() -> list[Path]:
    items = [json.loads(line) for line in (SOURCE / "items.jsonl").read_text().splitlines()]
    return [SOURCE / item["image"] for item in items if item["category"] in ("document", "chart")]


def compose(index: int, size: tuple[int, int], sources: list[Path]) -> Image.Image:
    """Three source images side by side, scaled to the canvas height (deterministic)."""
    canvas = Image.new("RGB", size, (255, 255, 255))
    x = 0
    for k in range(3):
        with Image.open(sources[(3 * index + k) % len(sources)]) as src:
            tile = src.convert("RGB")
        scale = size[1] / tile.height
        width = min(max(1, round(tile.width * scale)), size[0] - x)
        canvas.paste(tile.resize((width, size[1]), Image.Resampling.BILINEAR), (x, 0))
        x += width
        if x >= size[0]:
            break
    return canvas


def write_evalset(out: Path, *, items: int = 8, size: tuple[int, int] = (1920, 1080)) -> Path:
    (out / "images").mkdir(parents=True, exist_ok=True)
    sources = _sources()
    lines = []
    for i in range(items):
        name = f"images/fullhd-{i:02d}.png"
        compose(i, size, sources).save(out / name, optimize=False)
        lines.append(
            json.dumps(
                {
                    "id": f"fullhd-{i:02d}",
                    "category": "document",
                    "image": name,
                    "prompt": PROMPT,
                    "answers": ["(speed only)"],
                    "metric": "exact_match",
                    "meta": {"width": size[0], "height": size[1]},
                }
            )
        )
    (out / "items.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--size", default="1920x1080", help="WIDTHxHEIGHT")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    print(write_evalset(args.out, items=args.items, size=(width, height)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
