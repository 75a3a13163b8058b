"""Grow an evaluation set with more items of the same kinds: larger pools for the sequential floor.

A floor that must tell a drop of 0.02 from none needs a thousand items or more (the
sequential floor's `autotune evalset needs`), far more than the bundled sets hold. A pool is
a bundled set, copied byte for byte, followed by extra items from the same generators with
seeds of the pool's own namespace (``<pool>/<category>/<index>``), in the base set's category
shares (its fixed photos excepted: more copies of one picture are no new items).

Usage (from the repository root)::

    python -m tools.make_pool ocr-caption-3k                 # into studies/evalsets/
    python -m tools.make_pool smoke-240 --out evalsets --as smoke   # the committed smoke set

The pool's items (prompts, answers, how each was made) depend on the seeds alone and are
checked against the hash committed in evalsets/pools.json; the pixels depend on the installed
FreeType, so the images are hashed per build (`images_sha256` beside the items) and a study
records the hash of the set it was judged on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from tools import make_evalset, synth
from tools.make_evalset import spread
from tools.synth import SynthItem

REPO_ROOT = Path(__file__).resolve().parents[1]
POOLS_FILE = REPO_ROOT / "evalsets" / "pools.json"
Factory = Callable[[random.Random], SynthItem]


def _cycle(values: Sequence[Any], i: int) -> Any:
    return values[i % len(values)]


def _ocr_caption_factory(category: str, i: int, font_px: int) -> Factory:
    """Item i of a category's extras, made as ocr_caption_plan makes the bundled ones."""
    if category == "text_line":
        return partial(
            synth.text_line, content=_cycle(("code", "words", "id", "date"), i), font_px=font_px
        )
    if category == "document":
        return partial(synth.document, question=_cycle(("transcribe", "field"), i), font_px=font_px)
    if category == "receipt":
        return partial(synth.receipt, ask=_cycle(("total", "date", "phone"), i), font_px=font_px)
    if category == "chart":
        return partial(synth.bar_chart, ask=_cycle(("value", "value", "max"), i), font_px=font_px)
    if category == "chinese":
        return partial(
            synth.chinese_line,
            mixed=i % 2 == 1,
            n_chars=_cycle((4, 6, 8, 12, 16), i),
            font_px=font_px,
        )
    if category == "shapes":
        return partial(
            synth.shapes_scene, question=_cycle(("count", "colour", "side", "caption"), i)
        )
    raise ValueError(f"no generator for category {category!r}")


def _smoke_factory(category: str, i: int, font_px: int) -> Factory:
    if category == "text_line":
        return partial(make_evalset._smoke_line, font_px=font_px)
    if category == "shapes":
        return partial(make_evalset._smoke_scene, question=_cycle(("count", "colour"), i))
    raise ValueError(f"no generator for category {category!r}")


# (base set, items in all, extras' factory, font sizes per category)
POOLS: dict[
    str, tuple[str, int, Callable[[str, int, int], Factory], dict[str, tuple[int, int]]]
] = {
    "ocr-caption-3k": (
        "ocr-caption",
        3000,
        _ocr_caption_factory,
        {"chinese": (12, 28), "default": (10, 28)},
    ),
    "smoke-240": ("smoke", 240, _smoke_factory, {"default": make_evalset.SMOKE_FONT_PX}),
}


def extra_plan(
    pool: str, base_records: list[dict[str, Any]]
) -> list[tuple[str, str, int, Factory]]:
    """(item id, category, seed index, factory) for every extra item of `pool`."""
    _, total, factory, font_ranges = POOLS[pool]
    counts = Counter(r["category"] for r in base_records if r["category"] != "photo")
    prefixes = {r["category"]: r["id"].rsplit("-", 1)[0] for r in base_records}
    used = Counter(r["id"].rsplit("-", 1)[0] for r in base_records)
    extra_total = total - len(base_records)
    weight = sum(counts.values())
    shares = {c: extra_total * n // weight for c, n in sorted(counts.items())}
    for c in sorted(counts, key=lambda c: -counts[c])[: extra_total - sum(shares.values())]:
        shares[c] += 1  # the remainder to the largest categories, so the total is exact
    plan = []
    for category, n in sorted(shares.items()):
        low, high = font_ranges.get(category, font_ranges["default"])
        sizes = spread(low, high, n, f"{pool}/fonts/{category}")
        prefix = prefixes[category]
        for i, px in enumerate(sizes):
            index = used[prefix] + i
            plan.append((f"{prefix}-{index + 1:04d}", category, index, factory(category, i, px)))
    return plan


def _make(pool: str, images: Path, job: tuple[str, str, int, Factory]) -> dict[str, Any]:
    item_id, category, index, factory = job
    item = factory(random.Random(f"{pool}/{category}/{index}"))
    if item.category != category:
        raise AssertionError(f"{item_id}: the {category} generator made a {item.category} item")
    return {
        "id": item_id,
        "category": item.category,
        "image": make_evalset.save_image(item, images, item_id),
        "prompt": item.prompt,
        "answers": item.answers,
        "metric": item.metric,
        "meta": {**item.meta, "width": item.image.width, "height": item.image.height},
    }


def items_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def images_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for image in sorted(folder.iterdir()):
        digest.update(image.name.encode() + b"\0" + image.read_bytes())
    return digest.hexdigest()


def build(
    pool: str, out_dir: Path, *, name: str | None = None, workers: int | None = None
) -> dict[str, Any]:
    """Write `pool` to out_dir/<name or pool>: the base set copied, the extras generated."""
    base, *_ = POOLS[pool]
    base_dir = REPO_ROOT / "evalsets" / base
    base_records = [
        json.loads(line)
        for line in (base_dir / "items.jsonl").read_text(encoding="utf-8").splitlines()
        if line
    ]
    target = out_dir / (name or pool)
    staging = target.with_name(target.name + ".building")
    shutil.rmtree(staging, ignore_errors=True)
    images = staging / "images"
    images.mkdir(parents=True)
    for record in base_records:
        shutil.copy2(base_dir / record["image"], images / Path(record["image"]).name)
    plan = extra_plan(pool, base_records)
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as executor:
        extras = list(executor.map(partial(_make, pool, images), plan, chunksize=16))
    with (staging / "items.jsonl").open("w", encoding="utf-8") as f:
        for record in base_records + extras:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    # The base set's README, its description and legibility calibration, for the pool.
    old_readme = target / "README.md" if (target / "README.md").exists() else base_dir / "README.md"
    readme = make_evalset.render_readme(
        base, base_records + extras, staging, old_readme.read_text(encoding="utf-8")
    )
    if (name or pool) != base:
        readme = readme.replace(
            f"# Evaluation set `{base}`",
            f"# Evaluation pool `{name or pool}`\n\nThe `{base}` set followed by "
            f"{len(extras)} more items of its kinds (tools/make_pool.py).",
            1,
        )
    (staging / "README.md").write_text(readme, encoding="utf-8")
    result = {
        "pool": pool,
        "items": len(base_records) + len(extras),
        "items_sha256": items_digest(staging / "items.jsonl"),
        "images_sha256": images_digest(images),
    }
    (staging / "build.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)  # whole or not at all: an interrupted build leaves no half pool
    return result


def committed_digest(pool: str) -> str | None:
    pools = json.loads(POOLS_FILE.read_text(encoding="utf-8"))
    return pools.get(pool, {}).get("items_sha256")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pool", choices=sorted(POOLS), help="the pool to build")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "studies" / "evalsets")
    parser.add_argument("--as", dest="name", default=None, help="folder name (default: the pool's)")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: one a core)")
    parser.add_argument(
        "--record", action="store_true", help="write the items' hash into evalsets/pools.json"
    )
    args = parser.parse_args(argv)
    try:
        result = build(args.pool, args.out, name=args.name, workers=args.workers)
    except (OSError, ValueError) as exc:  # a missing font names its package
        print(f"make_pool: {args.pool}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    expected = committed_digest(args.pool)
    if args.record:
        pools = json.loads(POOLS_FILE.read_text(encoding="utf-8"))
        pools[args.pool] = {
            "base": POOLS[args.pool][0],
            "items": result["items"],
            "items_sha256": result["items_sha256"],
        }
        POOLS_FILE.write_text(json.dumps(pools, indent=1) + "\n", encoding="utf-8")
    elif expected != result["items_sha256"]:
        print(
            f"make_pool: {args.pool}: the items differ from the hash in {POOLS_FILE.name} "
            f"({result['items_sha256'][:12]} vs {str(expected)[:12]}): the generators changed",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
