"""Times the reference's timed accuracy pass in process: answers forced to their items' lengths.

The pass a dummy-weights study's reference runs (autotune.accuracy.timed): the first `--items`
items of the set in decision order, each answer forced to its expected answer's length in the
checkpoint's tokens + 1 (capped by the reference's max_new_tokens), answered at `--batch`
through the in-process worker's own driver (shortest first, the next batch prepared on a
thread, no step waiting for the device). Each repeat is timed on the wall clock and split per
batch into the time the driver waited for a prepared batch, the generate calls and the
replies' text; the figures print as one JSON object (bench/gpu/time_reference_pass.py splits
prefill from decoding, with a streamer that waits per step, beside the pass without one).

CPU, bundled tiny model (its compute is small, so the engine's own overheads show):
    python bench/cpu/reference_pass.py --repeats 3
GPU, the 2B architecture with random weights, several batches in one call:
    python bench/cpu/reference_pass.py --model Qwen/Qwen3-VL-2B-Instruct --dummy-weights \
        --space default --evalset ocr-caption-3k --items 1152 --batch 32,64,128 --device cuda
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from arguments import whole_number

from autotune.accuracy.timed import answer_lengths
from autotune.checkpoints.dummy import dummy_checkpoint
from autotune.engines.inprocess.worker import LaunchRequest, Worker, _BatchDriver
from autotune.engines.session import measure_plan
from autotune.space import SearchSpace, load_space

REPO = Path(__file__).resolve().parents[2]

TINY = REPO / "models" / "tiny-qwen3-vl"


def batch_list(text: str) -> list[int]:
    """'32,64,128': whole numbers of at least 1, comma-separated."""
    parse = whole_number(1)
    return [parse(part) for part in text.split(",")]


def one_pass(
    worker: Worker, space: SearchSpace, batch: int, ids: list[str], lengths: dict[str, int]
) -> dict[str, Any]:
    """One timed pass of `ids` at `batch`: its wall time and its per-batch split."""
    config = worker.launch.model_copy(update={"batch_size": batch})
    plan = measure_plan(space, config, accuracy_ids=None)
    plan = plan.model_copy(update={"workload_requests": 0})
    driver = _BatchDriver(worker, config, plan)
    worker.images.clear()  # decoded afresh, as on the reference's own new launch
    worker.engine.batch_log = log = []
    started = time.perf_counter()
    replies = asyncio.run(driver.answer(ids, batch, lengths))
    wall_s = time.perf_counter() - started
    worker.engine.batch_log = None
    tokens = sum(reply.timing.output_tokens for reply in replies)
    assert tokens == sum(lengths[i] for i in ids), "an answer was not forced to its length"
    if not log:  # an engine without the split (the code before it): the wall time alone
        return {"wall_s": wall_s, "answer_tokens": tokens, "per_batch": []}
    parts = {key: sum(entry[key] for entry in log) for key in ("generate_s", "replies_s")}
    # What the driver spent outside the model's calls: waiting for a batch prepared ahead.
    parts["prepare_wait_s"] = wall_s - sum(
        entry["prepare_s"] + entry["generate_s"] + entry["replies_s"] for entry in log
    )
    steps = sum(entry["steps"] for entry in log)
    return {
        "wall_s": wall_s,
        **parts,
        "batches": len(log),
        "decode_steps": steps,
        # An accuracy pass times no single step (nothing waits for the device per step):
        # the generate calls' time over their steps, the first (prefill's) included.
        "ms_per_step": 1000 * parts["generate_s"] / max(1, steps),
        "answer_tokens": tokens,
        "per_batch": log,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median and range of each figure over the repeats."""
    keys = ("wall_s", "generate_s", "replies_s", "prepare_wait_s", "ms_per_step")
    keys = tuple(key for key in keys if key in runs[0])
    return {
        key: {
            "median": statistics.median(run[key] for run in runs),
            "min": min(run[key] for run in runs),
            "max": max(run[key] for run in runs),
        }
        for key in keys
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(TINY), help="checkpoint folder (default: tiny)")
    parser.add_argument(
        "--dummy-weights",
        action="store_true",
        help="--model names an architecture (Qwen/Qwen3-VL-2B-Instruct): random weights",
    )
    parser.add_argument("--space", default="smoke", help="space whose reference answers")
    parser.add_argument("--evalset", default="smoke", help="evaluation set name or path")
    parser.add_argument("--items", type=whole_number(1), default=None, help="default: all")
    parser.add_argument("--batch", type=batch_list, default=[8], help="e.g. 32,64,128")
    parser.add_argument("--repeats", type=whole_number(1), default=3)
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--per-batch", action="store_true", help="print every batch's split")
    args = parser.parse_args(argv)
    model = args.model
    if args.dummy_weights:
        model = dummy_checkpoint(model, device="cuda" if args.device == "cuda" else "cpu")
    if not (Path(model) / "tokenizer.json").is_file():
        parser.error(f"{model} is no checkpoint folder (no tokenizer.json)")
    space = load_space(args.space)
    config = space.reference_config().model_copy(update={"backend": "transformers"})
    launch = LaunchRequest(model=model, device=args.device, evalset=args.evalset, launch=config)
    worker = Worker(launch)
    load_s = worker.load()
    ids = worker.evalset.decision_order()[: args.items]
    lengths = answer_lengths(worker.evalset, Path(model) / "tokenizer.json")
    lengths = {i: min(lengths[i], config.max_new_tokens) for i in ids}
    one_pass(worker, space, 2, ids[:2], lengths)  # the first call's one-off costs, untimed
    results: dict[str, Any] = {
        "model": model,
        "device": worker.engine.device,
        "evalset": args.evalset,
        "items": len(ids),
        "answer_tokens": sum(lengths.values()),
        "load_s": load_s,
        "environment": worker.engine.describe(),
        "batches": {},
    }
    for batch in args.batch:
        runs = [one_pass(worker, space, batch, ids, lengths) for _ in range(args.repeats)]
        if not args.per_batch:
            for run in runs:
                run.pop("per_batch")
        results["batches"][str(batch)] = {"summary": summary(runs), "runs": runs}
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
