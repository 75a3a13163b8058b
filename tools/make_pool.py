"""Grow an evaluation set with more items of the same kinds: larger pools for the sequential floor.

A floor that must tell a drop of 0.02 from none needs a thousand items or more (the
sequential floor's `autotune evalset needs`), far more than the bundled sets hold. A pool is
a bundled set, copied byte for byte, followed by extra items from the same generators with
seeds of the pool's own namespace (``<pool>/<category>/<index>``), in the base set's category
shares (its fixed photos excepted: more copies of one picture are no new items). Which pools
exist, their base set, size and items hash, is the pools file's (evalsets/pools.json).

Usage (from the repository root)::

    python -m tools.make_pool ocr-caption-3k                 # into studies/evalsets/
    python -m tools.make_pool smoke-240 --out evalsets --as smoke   # the committed smoke set
    python -m tools.make_pool NAME --pools-file FILE --record       # write NAME's hashes

Items are seeded one by one, so they are made in parallel, one process a core, and the result
is the serial build's byte for byte. The build goes to a hidden folder beside the target and is
renamed into place once whole: an error, Ctrl-C or SIGTERM removes it, and one a SIGKILL left
behind is removed by the next build of that pool (builds of one pool take turns on a lock).
The items are checked against the pools file's hash before the pool is put in place; the images
are drawn with the shipped fonts (evalsets/fonts/), and build.json records every file's hash.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import multiprocessing
import os
import random
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from autotune.errors import EvalsetError
from autotune.evalset.integrity import (
    BuildRecord,
    NotBuilt,
    read_build_record,
    write_build_record,
)
from autotune.evalset.pools import PoolEntry, check_pool, pools_file, read_pools
from tools import make_evalset, synth
from tools.make_evalset import spread
from tools.synth import SynthItem

REPO_ROOT = Path(__file__).resolve().parents[1]
PREFIX = "make_pool: "  # every error line; autotune relays the other lines as progress
Factory = Callable[[random.Random], SynthItem]
PROGRESS_STEPS = 10  # a progress line every tenth of the items
_PR_SET_PDEATHSIG = 1


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


@dataclass(frozen=True)
class Recipe:
    """How a base set's pools make their extra items: a factory per category and index, and
    the font sizes each category spreads over."""

    factory: Callable[[str, int, int], Factory]
    font_px: dict[str, tuple[int, int]]


RECIPES = {
    "ocr-caption": Recipe(_ocr_caption_factory, {"chinese": (12, 28), "default": (10, 28)}),
    "smoke": Recipe(_smoke_factory, {"default": make_evalset.SMOKE_FONT_PX}),
}


def extra_plan(
    pool: str, total: int, recipe: Recipe, base_records: list[dict[str, Any]]
) -> list[tuple[str, str, int, Factory]]:
    """(item id, category, seed index, factory) for every extra item of `pool`."""
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
        low, high = recipe.font_px.get(category, recipe.font_px["default"])
        sizes = spread(low, high, n, f"{pool}/fonts/{category}")
        prefix = prefixes[category]
        for i, px in enumerate(sizes):
            index = used[prefix] + i
            plan.append(
                (f"{prefix}-{index + 1:04d}", category, index, recipe.factory(category, i, px))
            )
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


def _worker_started(parent: int) -> None:
    """A worker leaves Ctrl-C to the builder, which stops the build and removes it, and dies
    with the builder, so none writes on after a SIGKILL (Linux's parent-death signal)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the builder died before the line above
            os._exit(1)


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def make_items(
    pool: str, plan: list[tuple[str, str, int, Factory]], images: Path, *, workers: int
) -> list[dict[str, Any]]:
    """Every planned item, written to `images`, in plan order; one process (`workers` 1) or a
    pool of them, with a progress line on stderr every tenth."""
    make = partial(_make, pool, images)
    executor = None
    if workers > 1:
        executor = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("fork") if sys.platform == "linux" else None,
            initializer=_worker_started,
            initargs=(os.getpid(),),
        )
    started, records = time.monotonic(), []
    try:
        made = executor.map(make, plan, chunksize=8) if executor else map(make, plan)
        for record in made:
            records.append(record)
            done, total = len(records), len(plan)
            if done * PROGRESS_STEPS // total > (done - 1) * PROGRESS_STEPS // total:
                print(
                    f"{pool}: {done:,} of {total:,} new items ({100 * done // total}%) in "
                    f"{time.monotonic() - started:.0f} s, {workers} "
                    f"process{'es' if workers > 1 else ''}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if executor is not None:  # on an error, the items not started are dropped
            executor.shutdown(wait=True, cancel_futures=True)
    return records


def rendered_with() -> dict[str, str]:
    """What draws the images: another version may draw other pixels from the same fonts."""
    import matplotlib
    import PIL
    from PIL import features

    return {
        "pillow": PIL.__version__,
        "freetype": str(features.version("freetype2")),
        "layout": "basic",  # pinned in tools.synth.base.load_font, whatever raqm is here
        "matplotlib": matplotlib.__version__,
    }


def _lock(out_dir: Path, name: str) -> TextIO:
    return open(out_dir / f".{name}.lock", "a", encoding="utf-8")


@contextlib.contextmanager
def _turn(out_dir: Path, name: str) -> Iterator[bool]:
    """Hold the lock of pool folder `name` (True when another build held it first), and
    remove what killed builds left: theirs, once no build of their pool holds its lock (a
    killed builder's lock goes with its last process)."""
    with _lock(out_dir, name) as lock:
        waited = False
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"{name}: waiting for another build of it to end", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
            waited = True
        for leftover in sorted(out_dir.glob(".*.building-*")) + sorted(out_dir.glob(".*.old-*")):
            owner = leftover.name[1:].rsplit(".building-", 1)[0].rsplit(".old-", 1)[0]
            if owner == name:
                shutil.rmtree(leftover, ignore_errors=True)
                continue
            with _lock(out_dir, owner) as other:
                try:
                    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a build of that pool is running: the folder is its own
                shutil.rmtree(leftover, ignore_errors=True)
        yield waited


def _put_in_place(staging: Path, target: Path) -> None:
    """Rename the finished build to `target`; what was there goes aside first, then away."""
    old = None
    if os.path.lexists(target):
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rename(target, old / "pool")
    os.rename(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _discard(staging: Path) -> None:
    """Remove a build that did not finish; a second Ctrl-C or SIGTERM may not cut it short."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        shutil.rmtree(staging, ignore_errors=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def build(
    pool: str,
    entry: PoolEntry,
    out_dir: Path,
    *,
    name: str | None = None,
    workers: int | None = None,
    accept: bool = False,
) -> BuildRecord:
    """Write `pool` to out_dir/<name or pool>: the base set copied, the extras generated.

    Raises:
        ValueError: the pool cannot be made (an unknown base, fewer items than its base), or
            its items differ from `entry`'s hash and `accept` is off.
    """
    recipe = RECIPES.get(entry.base)
    if recipe is None:
        raise ValueError(f"no generators for base set {entry.base!r}; known: {', '.join(RECIPES)}")
    base_dir = REPO_ROOT / "evalsets" / entry.base
    base_records = [
        json.loads(line)
        for line in (base_dir / "items.jsonl").read_text(encoding="utf-8").splitlines()
        if line
    ]
    if entry.items < len(base_records):
        raise ValueError(f"it holds its base set: {len(base_records)} items at least")
    target = out_dir / (name or pool)
    out_dir.mkdir(parents=True, exist_ok=True)
    with _turn(out_dir, target.name) as waited:
        if waited and not accept:
            with contextlib.suppress(NotBuilt, EvalsetError):
                check_pool(pool, target, entry)  # the build we waited for made it
                return read_build_record(target)[0]
        # Hidden, so never a pool's name; made with mkdir so the pool gets the umask's mode.
        staging = out_dir / f".{target.name}.building-{os.getpid()}-{secrets.token_hex(4)}"
        staging.mkdir()
        try:
            record = _build_into(staging, target, pool, entry, base_records, workers)
            if record.items_sha256 != entry.items_sha256 and not accept:
                raise ValueError(
                    f"its items differ from the hash in the pools file ({record.items_sha256[:12]}"
                    f" vs {entry.items_sha256[:12]}): the generators changed; check why, then "
                    "record the new hash with --record"
                )
            _put_in_place(staging, target)
        except BaseException:
            _discard(staging)
            raise
    if entry.images_sha256 and entry.images_sha256 != record.images_sha256:
        print(
            f"{pool}: note: its images differ from those the pools file records (drawn here "
            f"with {', '.join(f'{k} {v}' for k, v in record.rendered_with.items())}); its items "
            "are the same",
            file=sys.stderr,
        )
    return record


def _build_into(
    staging: Path,
    target: Path,
    pool: str,
    entry: PoolEntry,
    base_records: list[dict[str, Any]],
    workers: int | None,
) -> BuildRecord:
    """Copy the base set into `staging`, make the extras, write the README and build.json."""
    base_dir = REPO_ROOT / "evalsets" / entry.base
    images = staging / "images"
    images.mkdir()
    for record in base_records:
        shutil.copy2(base_dir / record["image"], images / Path(record["image"]).name)
    plan = extra_plan(pool, entry.items, RECIPES[entry.base], base_records)
    extras = make_items(pool, plan, images, workers=workers or default_workers())
    records = base_records + extras
    with (staging / "items.jsonl").open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    # The base set's README (its description and legibility calibration), or the one an
    # earlier build of this pool kept.
    old_readme = (
        target / "README.md" if (target / "README.md").is_file() else base_dir / "README.md"
    )
    readme = make_evalset.render_readme(
        entry.base, records, staging, old_readme.read_text(encoding="utf-8")
    )
    if target.name != entry.base:
        readme = readme.replace(
            f"# Evaluation set `{entry.base}`",
            f"# Evaluation pool `{target.name}`\n\nThe `{entry.base}` set followed by "
            f"{len(extras)} more items of its kinds (tools/make_pool.py).",
            1,
        )
    (staging / "README.md").write_text(readme, encoding="utf-8")
    return write_build_record(
        staging,
        pool=pool,
        images=[record["image"] for record in records],
        rendered_with=rendered_with(),
    )


def _record(path: Path, pool: str, record: BuildRecord, entry: PoolEntry) -> None:
    """Write the build's items and images hashes into the pools file, whole or not at all."""
    pools = json.loads(path.read_text(encoding="utf-8"))
    pools[pool] = {
        "base": entry.base,
        "items": record.items,
        "items_sha256": record.items_sha256,
        "images_sha256": record.images_sha256,
    }
    partial_file = path.with_name(f".{path.name}.partial")
    partial_file.write_text(
        json.dumps(pools, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    os.replace(partial_file, path)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds like Ctrl-C: the half-built pool is removed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pool", help="the pool to build (a name in the pools file)")
    parser.add_argument(
        "--pools-file",
        type=Path,
        default=None,
        help="the pools file (default: $AUTOTUNE_POOLS_FILE, else evalsets/pools.json)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "studies" / "evalsets")
    parser.add_argument("--as", dest="name", default=None, help="folder name (default: the pool's)")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: one a core)")
    parser.add_argument(
        "--record", action="store_true", help="write the build's hashes into the pools file"
    )
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        parser.error("--workers takes 1 or more")
    signal.signal(signal.SIGTERM, _stop)
    path = args.pools_file or pools_file()
    try:
        pools = read_pools(path)
        if args.pool not in pools:
            raise ValueError(f"no pool named {args.pool!r} in {path}; pools: {', '.join(pools)}")
        entry = pools[args.pool]
        record = build(
            args.pool, entry, args.out, name=args.name, workers=args.workers, accept=args.record
        )
        if args.record:
            _record(path, args.pool, record, entry)
    except (EvalsetError, OSError, ValueError) as exc:
        print(f"{PREFIX}{args.pool}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PREFIX}{args.pool}: interrupted; nothing of the build was kept", file=sys.stderr)
        return 130
    except SystemExit as stopped:
        print(f"{PREFIX}{args.pool}: stopped; nothing of the build was kept", file=sys.stderr)
        return int(stopped.code or 1)
    summary = {k: v for k, v in record.model_dump().items() if k not in ("lines", "files")}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
