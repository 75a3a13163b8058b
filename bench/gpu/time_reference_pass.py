"""Time the in-process reference's timed accuracy pass on one card, batch size by batch size.

Each answer is forced to its item's expected length (autotune.accuracy.timed), items are
answered shortest first, as a study's reference does. For each batch and each way of reading
the answers (a streamer that timestamps every step, which waits for the device each step,
or the finished batch's tokens) it prints the preparation, generation and decode-step split
as one JSON line, so the batch a study's reference should use can be read off one call.

    python3 bench/gpu/time_reference_pass.py --items 384 --batches 32,64,128
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from pathlib import Path

import torch

from autotune.accuracy.timed import answer_lengths
from autotune.checkpoints.dummy import dummy_checkpoint
from autotune.engines.inprocess.transformers import TransformersEngine
from autotune.evalset.dataset import load_evalset
from autotune.records.exchange import Prompt
from autotune.space.files import load_space


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="Qwen/Qwen3-VL-2B-Instruct")
    parser.add_argument("--evalset", default="ocr-caption-3k")
    parser.add_argument("--items", type=int, default=384)
    parser.add_argument("--batches", default="32,64,128")
    parser.add_argument("--profile-batch", type=int, default=32, help="0: no profiled pass")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    local = Path(args.model).is_dir()
    path = Path(args.model) if local else dummy_checkpoint(args.model, device=args.device)
    config = load_space("default").reference_config()
    engine = TransformersEngine(str(path), config, device=args.device)
    cuda = args.device == "cuda"
    started = time.perf_counter()
    engine.load()
    card = torch.cuda.get_device_name() if cuda else "cpu"
    print(json.dumps({"load_s": round(time.perf_counter() - started, 1), "card": card}))
    evalset = load_evalset(args.evalset)
    lengths = answer_lengths(evalset, Path(path) / "tokenizer.json")
    by_id = {item.id: item for item in evalset.items}
    ids = sorted(evalset.decision_order()[: args.items], key=lengths.__getitem__)
    prompts = [Prompt(item_id=i, image=by_id[i].load_image(), prompt=by_id[i].prompt) for i in ids]

    def one_pass(batch: int, step_times: bool, prompts: list[Prompt] = prompts) -> dict[str, float]:
        prepare_s = generate_s = 0.0
        steps = 0
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        for start in range(0, len(prompts), batch):
            group = prompts[start : start + batch]
            own = [lengths[p.item_id] for p in group]
            t0 = time.perf_counter()
            ready = engine.prepare(group, config)
            t1 = time.perf_counter()
            engine.generate(
                group,
                config,
                forced_tokens=max(own),
                answer_tokens=own,
                prepared=ready,
                step_times=step_times,
            )
            if cuda:
                torch.cuda.synchronize()
            prepare_s += t1 - t0
            generate_s += time.perf_counter() - t1
            steps += max(own)
        return {
            "batch": batch,
            "step_times": step_times,
            "items": len(prompts),
            "prepare_s": round(prepare_s, 2),
            "generate_s": round(generate_s, 2),
            "decode_steps": steps,
            "ms_per_step": round(1000 * generate_s / steps, 1),
            "items_per_s": round(len(prompts) / (prepare_s + generate_s), 1),
            "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1) if cuda else 0.0,
        }

    # Warm-up (kernels, allocator) on the first batch alone: a pass over every item at a small
    # batch would take longer than the rows it prepares.
    warm = max(int(b) for b in args.batches.split(","))
    one_pass(warm, False, prompts[:warm])
    for batch in [int(b) for b in args.batches.split(",")]:
        for step_times in (True, False):
            try:
                print(json.dumps(one_pass(batch, step_times)), flush=True)
            except torch.OutOfMemoryError:
                print(json.dumps({"batch": batch, "oom": True}), flush=True)
                torch.cuda.empty_cache()
    if args.profile_batch <= 0:
        return
    profiler = cProfile.Profile()
    profiler.enable()
    one_pass(args.profile_batch, False)
    profiler.disable()
    report = io.StringIO()
    pstats.Stats(profiler, stream=report).sort_stats("tottime").print_stats(18)
    print(report.getvalue()[-6000:])


if __name__ == "__main__":
    main()
