"""Train the bundled tiny Qwen3-VL test model to read, so that accuracy depends on image size.

The random checkpoint of `tools/make_test_model.py` scores zero everywhere, so an accuracy floor
never bites. This script trains the same tiny architecture (Qwen3VLForConditionalGeneration,
real processor geometry, Qwen's special-token ids, the character-level tokenizer) on synthetic
items from `autotune.evalset.synth`: short letter+digit lines and coloured-shape scenes with
exactly the prompts of the smoke evaluation set. Seeds come from the ``train-<seed>/...``
namespace, disjoint from the evaluation sets' ``<set>/<category>/<index>``.

Images reach the model as they do in autotune's engine: shrunk with LANCZOS to an image max side
(full size most of the time, sometimes 256 or 128), then resized by the processor, which enlarges
anything under 65536 pixels. Small sides are never trained on, so text at max side 64 stays
illegible while full-size text is read; that is the accuracy curve the tuner must respect.

Usage (from the repository root; one command trains, saves and evaluates)::

    python -m tools.train_test_model --out models/tiny-qwen3-vl --overwrite --time-budget 330
    python -m tools.train_test_model --out /tmp/m --overwrite --steps 3 --batch-size 4  # CPU try
    python -m tools.train_test_model --eval-only models/tiny-qwen3-vl --device cpu

With --time-budget the step count is fixed after a short calibration (the log records it); pass
--steps N to repeat a run's schedule. The data and the initial weights depend only on --seed;
GPU kernels are not bitwise deterministic, so a repeat matches closely, not exactly.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # workers fork after the first use

import torch
import torch.nn.functional as F
from PIL import Image
from transformers import AttentionInterface, AutoProcessor, Qwen3VLModel

from autotune.backends.base import resize_to_max_side
from autotune.evalset import synth
from tools import make_test_model as base

DEFAULT_OUT = base.DEFAULT_OUT
IM_END = "<|im_end|>"
TEXT_SHARE = 0.65  # the rest are shape scenes, half count and half colour questions
# (image max side, probability): the engine's downscaling, never below 128 (see module doc).
MAX_SIDE_MIX: tuple[tuple[int | None, float], ...] = ((None, 0.6), (256, 0.2), (128, 0.2))
EVAL_SIZES: tuple[int | None, ...] = (None, 256, 128, 64)  # the smoke space's choices
ARCH = {  # 35.6 MB of bf16 weights, most of it the 151936-row tied embedding
    "text_hidden_size": 96,
    "text_layers": 4,
    "text_heads": 4,
    "text_kv_heads": 2,
    "head_dim": 32,
    "text_intermediate_size": 384,
    "vision_hidden_size": 128,
    "vision_depth": 6,
    "vision_heads": 4,
    "vision_intermediate_size": 512,
    "deepstack_visual_indexes": [1, 3],
}
# Qwen3-VL's vision attention takes its packed (cu_seqlens) path only for implementations whose
# name contains "flash"; otherwise it loops over images, one attention call each, which costs more
# than the whole model at a batch of 128 images. Training registers a padded-batch equivalent
# under this name; the saved checkpoint uses sdpa.
PACKED_ATTENTION = "packed_sdpa_flash_varlen"


# --- data ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    image: Image.Image
    prompt: str
    answer: str
    max_side: int | None


def training_example(seed: int, index: int) -> Example:
    """Example `index` of the stream; it depends on (seed, index) only, not on worker layout."""
    rng = random.Random(f"train-{seed}/{index}")
    if rng.random() < TEXT_SHARE:
        # The smoke set's text lines (tools/make_evalset.py), font sizes a little wider.
        canvas = (rng.randint(256, 512), rng.randint(96, 160))
        item = synth.text_line(
            rng,
            content="code",
            length=rng.randint(4, 8),
            font_px=rng.randint(14, 42),
            canvas=canvas,
            max_rotate=1.0,
            max_blur=0.0,
            max_noise=0.0,
        )
    else:
        item = synth.shapes_scene(
            rng,
            question=rng.choice(("count", "colour")),
            canvas=rng.choice((256, 320, 384)),
            grid=3,
            n_objects=rng.randint(2, 5),
        )
    sides, weights = zip(*MAX_SIDE_MIX, strict=True)
    max_side = rng.choices(sides, weights)[0]
    image = resize_to_max_side(item.image.convert("RGB"), max_side)
    # answers[0] is the canonical form: the digit for counts, the first colour name.
    return Example(image, item.prompt, item.answers[0], max_side)


def prompt_text(processor: Any, prompt: str) -> str:
    """The chat prompt exactly as TransformersEngine renders it."""
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


class TrainBatches(torch.utils.data.Dataset):
    """Batch `step` holds examples step*B .. step*B+B-1; workers build whole batches.

    Pixels leave the worker as uint8 and one temporal frame (the processor repeats each image
    twice for temporal_patch_size 2): a quarter of the float bytes to move; the GPU finishes.
    """

    def __init__(self, processor: Any, config: Any, *, seed: int, batch_size: int, steps: int):
        self.processor = processor
        self.config = config
        self.seed = seed
        self.batch_size = batch_size
        self.steps = steps
        self._rope: Qwen3VLModel | None = None

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, step: int) -> dict[str, torch.Tensor]:
        first = step * self.batch_size
        examples = [training_example(self.seed, first + i) for i in range(self.batch_size)]
        return self.encode(examples)

    def rope_model(self) -> Qwen3VLModel:
        # get_rope_index needs only the config; on the meta device the model costs no memory.
        # Computing the 3D positions here keeps a per-sample Python loop off the GPU's critical
        # path.
        if self._rope is None:
            with torch.device("meta"):
                self._rope = Qwen3VLModel(self.config)
        return self._rope

    def encode(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        tokenizer = self.processor.tokenizer
        texts = [prompt_text(self.processor, ex.prompt) + ex.answer + IM_END for ex in examples]
        enc = self.processor(
            text=texts,
            images=[ex.image for ex in examples],
            padding=True,
            return_tensors="pt",
            do_rescale=False,
            do_normalize=False,
        )
        ids = enc["input_ids"]
        targets = torch.zeros_like(ids, dtype=torch.bool)
        for row, ex in enumerate(examples):
            answer_ids = tokenizer(ex.answer + IM_END, add_special_tokens=False)["input_ids"]
            n = len(answer_ids)
            # Left padding puts every answer at the end of its row.
            if ids[row, -n:].tolist() != answer_ids:
                raise RuntimeError(f"answer {ex.answer!r} is not tokenised at the end of its row")
            targets[row, -n:] = True
        positions, _ = self.rope_model().get_rope_index(
            input_ids=ids,
            mm_token_type_ids=enc["mm_token_type_ids"],
            image_grid_thw=enc["image_grid_thw"],
            attention_mask=enc["attention_mask"],
        )
        image_processor = self.processor.image_processor
        channels, frames = 3, image_processor.temporal_patch_size
        patches = enc["pixel_values"].view(enc["pixel_values"].shape[0], channels, frames, -1)
        # Flat positions of the answer tokens and of the tokens that predict them (the one
        # before; never across rows, the prompt comes first): index_select on the GPU needs
        # no host sync, where a boolean mask would.
        target_index = targets.view(-1).nonzero().squeeze(1)
        return {
            "input_ids": ids,
            "attention_mask": enc["attention_mask"],
            "position_ids": positions,
            "pixel_values": patches[:, :, 0].contiguous(),
            "image_grid_thw": enc["image_grid_thw"],
            "target_index": target_index,
            "predict_index": target_index - 1,
            "target_rows": target_index // ids.shape[1],
        }


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)  # many workers, one core each


def finish_pixels(patches: torch.Tensor, processor: Any) -> torch.Tensor:
    """uint8 single-frame patches -> the processor's float pixel_values, on patches' device."""
    ip = processor.image_processor
    mean = torch.tensor(ip.image_mean, device=patches.device).view(1, -1, 1)
    std = torch.tensor(ip.image_std, device=patches.device).view(1, -1, 1)
    x = (patches.float() * ip.rescale_factor - mean) / std
    n, channels, pixels = x.shape
    return x.unsqueeze(2).expand(n, channels, ip.temporal_patch_size, pixels).reshape(n, -1)


# --- model --------------------------------------------------------------------------------------


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    scaling: float | None = None,
    dropout: float = 0.0,
    cu_seq_lens_q: torch.Tensor | None = None,
    max_length_q: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Block-diagonal attention over packed images: pad to [images, max_len], one sdpa call."""
    if cu_seq_lens_q is None:
        raise ValueError("packed attention needs cu_seq_lens_q")
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [tokens, heads, dim]
    cu = cu_seq_lens_q.long()
    lengths = cu[1:] - cu[:-1]
    n_images, tokens = lengths.numel(), q.shape[0]
    longest = int(max_length_q) if max_length_q is not None else int(lengths.max())
    device = q.device
    image = torch.repeat_interleave(torch.arange(n_images, device=device), lengths)
    slot = torch.arange(tokens, device=device) - cu[:-1][image]

    def padded(t: torch.Tensor) -> torch.Tensor:
        out = t.new_zeros(n_images, longest, *t.shape[1:])
        out[image, slot] = t
        return out.transpose(1, 2)  # [images, heads, max_len, dim]

    valid = torch.arange(longest, device=device)[None, :] < lengths[:, None]
    out = F.scaled_dot_product_attention(
        padded(q), padded(k), padded(v), attn_mask=valid[:, None, None, :], scale=scaling
    )
    return out.transpose(1, 2)[image, slot].unsqueeze(0), None  # [1, tokens, heads, dim]


AttentionInterface.register(PACKED_ATTENTION, packed_attention)


def set_vision_attention(model: Any, name: str) -> None:
    model.config.vision_config._attn_implementation = name


def batch_loss(model: Any, batch: dict[str, torch.Tensor], processor: Any) -> dict[str, Any]:
    """Cross-entropy on the answer tokens and <|im_end|>, logits only where they are needed."""
    out = model.model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        pixel_values=finish_pixels(batch["pixel_values"], processor),
        image_grid_thw=batch["image_grid_thw"],
    )
    hidden = out.last_hidden_state
    hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, batch["predict_index"])
    logits = model.lm_head(hidden).float()
    labels = batch["input_ids"].reshape(-1).index_select(0, batch["target_index"])
    loss = F.cross_entropy(logits, labels)
    hits = logits.argmax(-1) == labels
    # A row is read correctly when all its answer tokens are right (teacher-forced).
    rows = batch["input_ids"].shape[0]
    wrong = torch.zeros(rows, device=hits.device).index_add_(
        0, batch["target_rows"], (~hits).float()
    )
    return {
        "loss": loss,
        "token_hits": hits.float().sum(),
        "tokens": float(labels.numel()),
        "rows_right": (wrong == 0).float().sum(),
        "rows": float(rows),
    }


def check_packed_attention(model: Any, batch: dict[str, torch.Tensor], processor: Any) -> float:
    """Relative loss difference between packed and stock sdpa vision attention (fp32)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        set_vision_attention(model, "sdpa")
        stock = batch_loss(model, batch, processor)["loss"].item()
        set_vision_attention(model, PACKED_ATTENTION)
        packed = batch_loss(model, batch, processor)["loss"].item()
    model.train(was_training)
    return abs(packed - stock) / max(abs(stock), 1e-12)


def check_pixels(dataset: TrainBatches, examples: Sequence[Example]) -> float:
    """Largest difference between finish_pixels() and the processor's own pixel_values."""
    ours = finish_pixels(dataset.encode(examples)["pixel_values"], dataset.processor)
    theirs = dataset.processor(
        text=[prompt_text(dataset.processor, ex.prompt) for ex in examples],
        images=[ex.image for ex in examples],
        padding=True,
        return_tensors="pt",
    )["pixel_values"]
    return float((ours - theirs).abs().max())


def learning_rate(step: int, *, peak: float, warmup: int, total: int | None) -> float:
    """Linear warm-up, then cosine decay to 5% of the peak at `total`."""
    if step <= warmup:
        return peak * step / warmup
    if total is None:
        return peak
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def optimizer_for(model: Any, *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        # Norms, biases and the (tied) embedding are not decayed: decay would pull the rows of
        # characters that rarely occur towards zero between their updates.
        (decay if param.ndim >= 2 and "embed" not in name else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = next(model.parameters()).is_cuda
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98), eps=1e-8, fused=fused)


# --- checkpoint ---------------------------------------------------------------------------------


def save_trained(model: Any, tokenizer: Any, out_dir: Path) -> None:
    """Like make_test_model.save_checkpoint (bf16, release-layout config), with eos kept.

    One model.safetensors: the 151936-row embedding alone is 29 MB, more than any shard size
    that would split the rest, so sharding would only add files.
    """
    set_vision_attention(model, "sdpa")
    base.save_checkpoint(model, tokenizer, out_dir, dtype=torch.bfloat16)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# --- evaluation ---------------------------------------------------------------------------------


def evaluate_checkpoint(
    model_dir: Path,
    *,
    device: str,
    dtypes: Sequence[str],
    sizes: Sequence[int | None] = EVAL_SIZES,
    batch_size: int = 8,
    evalset: str = "smoke",
) -> list[dict[str, Any]]:
    """Greedy smoke-set accuracy through autotune's own engine, per dtype and image max side."""
    from autotune.accuracy import score_predictions
    from autotune.backends.base import Request
    from autotune.backends.transformers_engine import TransformersEngine
    from autotune.evalset.dataset import load_evalset
    from autotune.params import TrialConfig

    items = load_evalset(evalset)
    requests = [Request(it.id, it.load_image(), it.prompt) for it in items.items]
    rows = []
    for dtype in dtypes:
        for side in sizes:
            config = TrialConfig(
                dtype=dtype,
                image_max_side=side,
                batch_size=batch_size,
                max_new_tokens=16,
                do_sample=False,
            )
            engine = TransformersEngine(str(model_dir), config, device=device)
            engine.load()
            predictions = {}
            for start in range(0, len(requests), batch_size):
                for done in engine.generate(requests[start : start + batch_size]):
                    predictions[done.item_id] = done.text
            engine.close()
            report = score_predictions(items, predictions)
            rows.append(
                {
                    "dtype": dtype,
                    "image_max_side": side,
                    "accuracy": report.accuracy,
                    "by_category": report.by_category,
                    "predictions": predictions,
                }
            )
    return rows


def accuracy_table(rows: Sequence[dict[str, Any]]) -> str:
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    sides = list(dict.fromkeys(r["image_max_side"] for r in rows))
    lookup = {(r["dtype"], r["image_max_side"]): r for r in rows}
    lines = ["| image max side | " + " | ".join(dtypes) + " |", "|---" * (len(dtypes) + 1) + "|"]
    for side in sides:
        cells = []
        for dtype in dtypes:
            row = lookup[(dtype, side)]
            parts = ", ".join(f"{k} {v:.2f}" for k, v in row["by_category"].items())
            cells.append(f"{row['accuracy']:.3f} ({parts})")
        lines.append(f"| {'full' if side is None else side} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- training -----------------------------------------------------------------------------------


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def train(args: argparse.Namespace) -> dict[str, Any]:
    device = resolve_device(args.device)
    out_dir: Path = args.out
    base._prepare_out_dir(out_dir, args.overwrite)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = base.build_tokenizer()
    # The processor is read from the files the checkpoint ships, so training sees exactly the
    # preprocessing that serving will use.
    base.save_tokenizer(tokenizer, out_dir)
    base.write_processor_files(out_dir)
    processor = AutoProcessor.from_pretrained(out_dir)
    processor.tokenizer.padding_side = "left"
    config = base.build_config(**ARCH)

    auto_steps = args.steps is None
    planned = args.max_steps if auto_steps else args.steps
    dataset = TrainBatches(
        processor, config, seed=args.seed, batch_size=args.batch_size, steps=planned
    )
    workers = args.workers if args.workers >= 0 else max(1, len(os.sched_getaffinity(0)) - 2)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        shuffle=False,
        num_workers=workers,
        worker_init_fn=_worker_init if workers else None,
        prefetch_factor=4 if workers else None,
        pin_memory=device == "cuda",
        multiprocessing_context="fork" if workers else None,
    )
    batches = iter(loader)  # fork the workers before CUDA starts in this process

    model = base.build_model(config, seed=args.seed, silence_tokens=False).to(device)
    check_examples = [training_example(args.seed + 10_000, i) for i in range(4)]
    pixel_diff = check_pixels(dataset, check_examples)
    check_batch = {k: v.to(device) for k, v in dataset.encode(check_examples).items()}
    attention_diff = check_packed_attention(model, check_batch, processor)
    print(f"checks: pixel max diff {pixel_diff:.2e}, packed attention {attention_diff:.2e}")
    if pixel_diff > 1e-5 or attention_diff > 1e-4:
        raise RuntimeError("the training input path does not match the serving path")
    set_vision_attention(model, PACKED_ATTENTION)
    model.train()

    optimizer = optimizer_for(model, lr=args.lr, weight_decay=args.weight_decay)
    warmup = min(args.warmup, max(1, planned // 10))
    total = None if auto_steps else args.steps
    use_bf16 = device == "cuda"
    history: list[dict[str, float]] = []
    sums = {k: torch.zeros((), device=device) for k in ("loss", "token_hits", "rows_right")}
    counts = {"tokens": 0.0, "rows": 0.0, "steps": 0}
    # Time steps only once the batches the workers prefetched are used up, or the rate (and so
    # the step count) would be overestimated.
    calibrate_from = args.calibration_steps // 3
    start = time.perf_counter()
    t_calibrate = start
    data_wait = 0.0
    stopped_early = False
    step = 0
    while total is None or step < total:
        waited = time.perf_counter()
        batch = next(batches, None)
        data_wait += time.perf_counter() - waited
        if batch is None:
            break
        step += 1
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, peak=args.lr, warmup=warmup, total=total)
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=use_bf16):
            result = batch_loss(model, batch, processor)
        result["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        for key in sums:
            sums[key] += result[key].detach()
        counts["tokens"] += result["tokens"]
        counts["rows"] += result["rows"]
        counts["steps"] += 1

        if step == calibrate_from:
            if device == "cuda":
                torch.cuda.synchronize()
            t_calibrate = time.perf_counter()
        if auto_steps and step == args.calibration_steps:
            if device == "cuda":
                torch.cuda.synchronize()
            now = time.perf_counter()
            rate = (step - calibrate_from) / (now - t_calibrate)
            remaining = args.time_budget - (now - start)
            total = min(args.max_steps, max(2 * warmup, step + int(rate * remaining)))
            print(f"calibrated: {rate:.2f} steps/s -> {total} steps in total", flush=True)
        elapsed = time.perf_counter() - start
        # A safety stop: the schedule assumed the calibrated rate, but the run must end.
        stopped_early = auto_steps and elapsed > args.time_budget + args.grace
        if step % args.log_every == 0 or step == total or stopped_early:
            entry = {
                "step": step,
                "seconds": round(elapsed, 1),
                "data_wait_s": round(data_wait, 1),
                "lr": optimizer.param_groups[0]["lr"],
                "loss": sums["loss"].item() / counts["steps"],
                "token_acc": sums["token_hits"].item() / counts["tokens"],
                "row_acc": sums["rows_right"].item() / counts["rows"],
            }
            history.append(entry)
            print(
                f"step {step:5d}  {entry['seconds']:6.1f}s  lr {entry['lr']:.2e}  "
                f"loss {entry['loss']:.4f}  token acc {entry['token_acc']:.3f}  "
                f"row acc {entry['row_acc']:.3f}  data wait {entry['data_wait_s']:.0f}s",
                flush=True,
            )
            for key in sums:
                sums[key].zero_()
            counts = {"tokens": 0.0, "rows": 0.0, "steps": 0}
        if stopped_early:
            print(f"time budget exceeded: stopping at step {step} of {total}", flush=True)
            break
    if device == "cuda":
        torch.cuda.synchronize()
    train_seconds = time.perf_counter() - start
    del batches  # stops the workers

    model.eval()
    save_trained(model, tokenizer, out_dir)
    params = sum(p.numel() for p in model.parameters())
    return {
        "device": device,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "steps": step,
        "planned_steps": total,
        "stopped_early": stopped_early,
        "data_wait_seconds": round(data_wait, 1),
        "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20)
        if device == "cuda"
        else None,
        "warmup_steps": warmup,
        "workers": workers,
        "train_seconds": round(train_seconds, 1),
        "samples": step * args.batch_size,
        "parameters": params,
        "checkpoint_bytes": folder_bytes(out_dir),
        "checks": {"pixel_max_diff": pixel_diff, "packed_attention_rel_diff": attention_diff},
        "history": history,
    }


# --- CLI ----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="checkpoint folder")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing folder")
    parser.add_argument("--seed", type=int, default=0, help="data stream and initial weights")
    parser.add_argument("--device", default="auto", help="auto, cuda or cpu")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (fixes the run)")
    parser.add_argument(
        "--time-budget",
        type=float,
        default=330.0,
        help="without --steps: seconds of training; the step count is set after calibration",
    )
    parser.add_argument("--max-steps", type=int, default=20_000, help="cap for --time-budget")
    parser.add_argument(
        "--grace", type=float, default=30.0, help="seconds past the budget before a hard stop"
    )
    parser.add_argument(
        "--calibration-steps",
        type=int,
        default=300,
        help="with --time-budget: the step at which the step count is fixed (timed from a third)",
    )
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument(
        "--warmup", type=int, default=300, help="warm-up steps (at most a tenth of --steps)"
    )
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--clip", type=float, default=1.0, help="gradient norm clip")
    parser.add_argument("--workers", type=int, default=-1, help="data workers (-1: cores - 2)")
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--log-json", type=Path, default=None, help="write the run log here")
    parser.add_argument(
        "--eval-dtypes", default="float32,bfloat16", help="comma-separated; empty: no eval"
    )
    parser.add_argument("--eval-batch-size", type=int, default=8)
    parser.add_argument(
        "--eval-only", type=Path, default=None, help="only evaluate this checkpoint folder"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.manual_seed(args.seed)
    log: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "arch": ARCH,
        "text_share": TEXT_SHARE,
        "max_side_mix": MAX_SIDE_MIX,
        "versions": {
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "python": sys.version.split()[0],
        },
    }
    model_dir = args.eval_only or args.out

    def write_log() -> None:
        if args.log_json:
            args.log_json.parent.mkdir(parents=True, exist_ok=True)
            args.log_json.write_text(json.dumps(log, indent=1) + "\n", encoding="utf-8")

    if args.eval_only is None:
        log["train"] = train(args)
        write_log()  # kept even if the evaluation below fails
        print(
            f"trained {log['train']['steps']} steps in {log['train']['train_seconds']} s; "
            f"{model_dir}: {log['train']['checkpoint_bytes'] / 1e6:.2f} MB",
            flush=True,
        )
    dtypes = [d for d in args.eval_dtypes.split(",") if d]
    if dtypes:
        started = time.perf_counter()
        rows = evaluate_checkpoint(
            model_dir,
            device=resolve_device(args.device),
            dtypes=dtypes,
            batch_size=args.eval_batch_size,
        )
        log["eval"] = rows
        log["eval_seconds"] = round(time.perf_counter() - started, 1)
    write_log()
    if dtypes:
        full = next(r for r in log["eval"] if r["image_max_side"] is None)
        print("full-size answers:", json.dumps(full["predictions"]))
        print(f"smoke-set accuracy (greedy, {log['eval_seconds']} s):")
        print(accuracy_table(log["eval"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
