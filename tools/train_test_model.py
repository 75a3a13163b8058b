"""Train the bundled tiny Qwen3-VL test model to read, so that accuracy depends on image size.

The random checkpoint of `tools/make_test_model.py` scores zero everywhere, so an accuracy floor
never bites. This script trains the same tiny architecture (Qwen3VLForConditionalGeneration,
real processor geometry but for a 4-token minimum, Qwen's special-token ids, the
character-level tokenizer) on synthetic items from `tools.synth`: the smoke set's codes (one
glyph per 32-pixel cell) and shape strips, with exactly the smoke set's prompts. Seeds come from
the ``train-<seed>/...`` namespace, disjoint from the evaluation sets' ``<set>/<category>/<index>``.

Images reach the model as they do in autotune's engine, on the processor's grid, at full size
only: shrunk to 256, 128 or 64 several glyphs share a vision token and the reader fails, which
is the trade-off the accuracy floor must see. Three things make it learn on 2 CPU cores in
about half an hour (issue 28; the last recipe needed 42 H200 minutes and never finished):
the loss is computed over the ~120 token ids the data uses (`TrainedVocabulary`, exactly the
full softmax's loss), a linear glyph probe on the vision tokens (`GlyphProbe`) ends the plateau
before reading, and the layout puts each glyph in a vision token of its own.

Usage (from the repository root; one command trains, saves and evaluates)::

    python -m tools.train_test_model --out models/tiny-qwen3-vl --overwrite --device cpu \
        --steps 1500
    python -m tools.train_test_model --out /tmp/m --overwrite --steps 3 --batch-size 4  # a try
    python -m tools.train_test_model --eval-only models/tiny-qwen3-vl --device cpu

A run longer than one sitting saves and resumes:

    python -m tools.train_test_model --out OUT --steps 1500 --state STATE --stop-after 540

trains until 540 s have passed in this call, writes STATE/training_state.pt (weights,
optimizer, step, log, counters; the schedule and the data position follow from the step) and
exits with status 3; the same command again resumes there, and the call that reaches the last
step saves and evaluates the checkpoint. A resumed run equals an uninterrupted one
(tests/tools/test_train_resume.py).

With --time-budget the step count is fixed after a short calibration (the log records it); pass
--steps N to repeat a run's schedule. The data and the initial weights depend only on --seed;
on the CPU a repeat gives the same weights, on a GPU closely, not exactly.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import string
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # workers fork after the first use

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AutoProcessor

from tools import make_test_model as base
from tools.model_card import TRAINING_LOG, accuracy_table, evaluate_checkpoint
from tools.train_data import (
    MAX_SIDE_MIX,
    NO_CELL_LABEL,
    PROBE_CLASSES,
    PROBE_SLOTS,
    READER_MIN_PIXELS,
    TEXT_SHARE,
    Example,
    TrainBatches,
    data_recipe,
    finish_pixels,
    prompt_text,
    training_example,
    worker_init,
)

DEFAULT_OUT = base.DEFAULT_OUT
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
# name contains "flash"; otherwise it loops over the images, one attention call per image and
# layer, launch-bound at a batch of 128 images. Training registers a padded-batch equivalent
# under this name (checked against sdpa at start); the saved checkpoint uses sdpa.
PACKED_ATTENTION = "packed_sdpa_flash_varlen"


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


class TrainedVocabulary:
    """The token ids training can ever see, and a loss over them that equals the full one.

    The character-level vocabulary has 151936 rows (Qwen's special-token ids sit at its end),
    but the smoke items use about a hundred: printable ASCII and the added tokens. Every other
    row is one shared, trained vector `rest`, so all those ids have one logit h.rest and
    together the softmax mass (V - K) * exp(h.rest): a single extra logit h.rest + log(V - K)
    stands in for them. The loss and its gradients are those of the full softmax over the
    tied embedding whose unused rows all equal `rest`, at a thousandth of its cost (on 2 CPU
    cores the full one took a quarter of every step). `write_rest` puts the vector into those
    rows before saving, so the checkpoint scores every unused id exactly as training did.
    """

    def __init__(self, tokenizer: Any, vocab_size: int, hidden_size: int):
        printable = tokenizer("".join(string.printable), add_special_tokens=False)["input_ids"]
        added = range(base.NUM_PLAIN_TOKENS, base.NUM_PLAIN_TOKENS + len(base.QWEN_ADDED_TOKENS))
        self.ids = torch.tensor(sorted({*printable, *added}), dtype=torch.long)
        self.position = torch.full((vocab_size,), -1, dtype=torch.long)
        self.position[self.ids] = torch.arange(len(self.ids))
        self.log_rest = math.log(vocab_size - len(self.ids))
        self.rest = torch.nn.Parameter(torch.zeros(hidden_size))

    def to(self, device: str) -> TrainedVocabulary:
        self.rest = torch.nn.Parameter(self.rest.detach().to(device))
        return self

    def check(self, input_ids: torch.Tensor) -> None:
        unknown = self.position.to(input_ids.device)[input_ids] < 0
        if bool(unknown.any()):
            found = input_ids[unknown].unique().tolist()[:10]
            raise RuntimeError(f"training data holds ids outside the trained vocabulary: {found}")

    def logits(self, model: Any, hidden: torch.Tensor) -> torch.Tensor:
        """[tokens, K + 1]: the used ids' logits, then the stand-in for all the others."""
        ids = self.ids.to(hidden.device)
        used = hidden @ model.lm_head.weight.index_select(0, ids).T
        rest = (hidden @ self.rest + self.log_rest).unsqueeze(1)
        return torch.cat([used, rest], dim=1)

    def write_rest(self, model: Any) -> None:
        """Every unused row of the (tied) embedding := `rest`, as the loss assumed."""
        weight = model.get_input_embeddings().weight
        unused = torch.ones(weight.shape[0], dtype=torch.bool, device=weight.device)
        unused[self.ids.to(weight.device)] = False
        with torch.no_grad():
            weight[unused] = self.rest.detach().to(weight.dtype)


class GlyphProbe(torch.nn.Module):
    """A linear read-out of what each vision token shows (a glyph, a coloured shape, nothing),
    trained beside the model.

    The answer's loss reaches the vision encoder only through attention that does not yet know
    where to look, so a reader trained from scratch sits on a plateau (on an H200, 1,100-1,800
    steps; far longer than 2 CPU cores can give). The probe's loss teaches the encoder glyph
    features directly, at the tokens glyphs and shapes occupy (train_data.glyph_cells,
    shape_cells); the decoder then learns where to look. The probe is not in the checkpoint.
    """

    def __init__(self, hidden_size: int, classes: int):
        super().__init__()
        self.read_out = torch.nn.Linear(hidden_size, classes)
        self.tokens: torch.Tensor | None = None

    def attach(self, model: Any) -> None:
        def keep(_module: Any, _inputs: Any, output: Any) -> None:
            self.tokens = output.pooler_output  # [vision tokens, hidden], all images in order

        model.model.visual.register_forward_hook(keep)

    def loss(self, labels: torch.Tensor) -> torch.Tensor:
        """labels: [vision tokens, PROBE_SLOTS], a class per slot (train_data._object_cells)."""
        if self.tokens is None:
            raise RuntimeError("the glyph probe saw no vision forward pass")
        logits = self.read_out(self.tokens.float()).view(len(labels), PROBE_SLOTS, -1)
        self.tokens = None
        if not bool((labels != NO_CELL_LABEL).any()):
            return logits.sum() * 0.0
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=NO_CELL_LABEL
        )


def linear_patch_embedding(model: Any) -> None:
    """Run the vision patch embedding as the matrix product it is, for training on the CPU.

    Its Conv3d has kernel == stride, so it is a linear map of each flattened patch (channel,
    frame, row, column: the weight's own layout). On 2 CPU cores the convolution's backward
    pass took a tenth of every step; the product gives the same values and gradients. Only the
    module's forward is replaced: the weights, and so the saved checkpoint, are unchanged.
    """
    embed = model.model.visual.patch_embed

    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        weight = embed.proj.weight
        flat = hidden_states.reshape(-1, weight[0].numel()).to(weight.dtype)
        return F.linear(flat, weight.reshape(weight.shape[0], -1), embed.proj.bias)

    embed.forward = forward


def set_vision_attention(model: Any, name: str) -> None:
    model.config.vision_config._attn_implementation = name


def batch_loss(
    model: Any,
    batch: dict[str, torch.Tensor],
    processor: Any,
    vocabulary: TrainedVocabulary,
    probe: GlyphProbe | None = None,
) -> dict[str, Any]:
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
    logits = vocabulary.logits(model, hidden).float()
    labels = batch["input_ids"].reshape(-1).index_select(0, batch["target_index"])
    labels = vocabulary.position.to(labels.device)[labels]
    loss = F.cross_entropy(logits, labels)
    probe_loss = probe.loss(batch["cell_labels"]) if probe is not None else torch.zeros(())
    hits = logits.argmax(-1) == labels
    # A row is read correctly when all its answer tokens are right (teacher-forced).
    rows = batch["input_ids"].shape[0]
    wrong = torch.zeros(rows, device=hits.device).index_add_(
        0, batch["target_rows"], (~hits).float()
    )
    return {
        "loss": loss,
        "objective": loss + probe_loss,
        "probe_loss": probe_loss.detach(),
        "token_hits": hits.float().sum(),
        "tokens": float(labels.numel()),
        "rows_right": (wrong == 0).float().sum(),
        "rows": float(rows),
    }


def check_packed_attention(
    model: Any, batch: dict[str, torch.Tensor], processor: Any, vocabulary: TrainedVocabulary
) -> float:
    """Relative loss difference between packed and stock sdpa vision attention (fp32)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        set_vision_attention(model, "sdpa")
        stock = batch_loss(model, batch, processor, vocabulary)["loss"].item()
        set_vision_attention(model, PACKED_ATTENTION)
        packed = batch_loss(model, batch, processor, vocabulary)["loss"].item()
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


def optimizer_for(
    model: Any,
    vocabulary: TrainedVocabulary,
    probe: GlyphProbe,
    *,
    lr: float,
    weight_decay: float,
) -> torch.optim.Optimizer:
    # The unused rows are embedding rows: no decay. The probe is a training aid: no decay.
    decay, no_decay = [], [vocabulary.rest, *probe.parameters()]
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
    base.save_checkpoint(
        model, tokenizer, out_dir, dtype=torch.bfloat16, min_pixels=READER_MIN_PIXELS
    )


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# --- saving and resuming -------------------------------------------------------------------------

STATE_FILE = "training_state.pt"
REST_KEY = "vocabulary.rest"  # the shared unused-row vector, kept beside the weights
EXIT_RESUME = 3  # stopped by --stop-after: run the same command again to go on
# Arguments a resumed run must share with the run it continues.
SCHEDULE_ARGS = (
    "seed",
    "steps",
    "batch_size",
    "lr",
    "warmup",
    "clean_steps",
    "one_char_steps",
    "weight_decay",
    "clip",
)


def schedule_of(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name) for name in SCHEDULE_ARGS}


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Written to a temporary file and renamed: a run killed mid-save keeps the last state."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    torch.save(state, partial)
    os.replace(partial, path)


def load_state(path: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state["schedule"] != schedule_of(args):
        raise SystemExit(
            f"{path} was saved by a run with {state['schedule']}; resume with the same "
            "arguments, or pass another --state"
        )
    return state


# --- training -----------------------------------------------------------------------------------


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def train(args: argparse.Namespace) -> dict[str, Any]:
    device = resolve_device(args.device)
    out_dir: Path = args.out
    state_path = args.state / STATE_FILE if args.state else None
    resumed = load_state(state_path, args) if state_path else None
    if resumed is None:  # a resumed run writes into the folder its first call prepared
        base._prepare_out_dir(out_dir, args.overwrite)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = base.build_tokenizer()
    # The processor is read from the files the checkpoint ships, so training sees exactly the
    # preprocessing that serving will use.
    base.save_tokenizer(tokenizer, out_dir)
    base.write_processor_files(out_dir, min_pixels=READER_MIN_PIXELS)
    processor = AutoProcessor.from_pretrained(out_dir)
    processor.tokenizer.padding_side = "left"
    config = base.build_config(**ARCH)

    auto_steps = args.steps is None
    planned = args.max_steps if auto_steps else args.steps
    first_step = resumed["step"] if resumed else 0
    dataset = TrainBatches(
        processor,
        config,
        seed=args.seed,
        batch_size=args.batch_size,
        steps=planned,
        clean_steps=args.clean_steps,
        one_char_steps=args.one_char_steps,
        start=first_step,
    )
    workers = args.workers if args.workers >= 0 else max(1, len(os.sched_getaffinity(0)) - 2)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        shuffle=False,
        num_workers=workers,
        worker_init_fn=worker_init if workers else None,
        prefetch_factor=8 if workers else None,  # keep the GPU fed: the data sets the pace
        pin_memory=device == "cuda",
        multiprocessing_context="fork" if workers else None,
    )
    batches = iter(loader)  # fork the workers before CUDA starts in this process

    model = base.build_model(config, seed=args.seed, silence_tokens=False).to(device)
    text = config.text_config
    vocabulary = TrainedVocabulary(tokenizer, text.vocab_size, text.hidden_size).to(device)
    vocabulary.write_rest(model)
    check_examples = [training_example(args.seed + 10_000, i) for i in range(4)]
    pixel_diff = check_pixels(dataset, check_examples)
    check_batch = {k: v.to(device) for k, v in dataset.encode(check_examples).items()}
    vocabulary.check(check_batch["input_ids"])
    attention_diff = check_packed_attention(model, check_batch, processor, vocabulary)
    print(f"checks: pixel max diff {pixel_diff:.2e}, packed attention {attention_diff:.2e}")
    if pixel_diff > 1e-5 or attention_diff > 1e-4:
        raise RuntimeError("the training input path does not match the serving path")
    set_vision_attention(model, PACKED_ATTENTION)
    if device == "cpu":
        linear_patch_embedding(model)
    model.train()

    probe = GlyphProbe(text.hidden_size, len(PROBE_CLASSES) * PROBE_SLOTS).to(device)
    probe.attach(model)
    optimizer = optimizer_for(model, vocabulary, probe, lr=args.lr, weight_decay=args.weight_decay)
    if resumed:
        model.load_state_dict(resumed["model"])
        probe.load_state_dict(resumed["probe"])
        with torch.no_grad():
            vocabulary.rest.copy_(resumed["rest"])
        optimizer.load_state_dict(resumed["optimizer"])
        torch.set_rng_state(resumed["torch_rng"])
        print(f"resumed at step {first_step} of {args.steps} from {state_path}", flush=True)
    warmup = min(args.warmup, max(1, planned // 10))
    total = None if auto_steps else args.steps
    use_bf16 = device == "cuda"
    history: list[dict[str, float]] = list(resumed["history"]) if resumed else []
    keys = ("loss", "probe_loss", "token_hits", "rows_right", "grad_norm", "skipped")
    sums = {k: torch.zeros((), device=device) for k in keys}
    skipped_total = torch.zeros((), device=device)
    params = [p for p in model.parameters() if p.requires_grad]
    params += [vocabulary.rest, *probe.parameters()]
    counts = {"tokens": 0.0, "rows": 0.0, "steps": 0}
    earlier_seconds = data_wait_before = 0.0
    if resumed:  # the log interval in progress goes on where it stopped
        for key in keys:
            sums[key] = resumed["sums"][key].to(device)
        skipped_total = resumed["skipped_total"].to(device)
        counts = dict(resumed["counts"])
        earlier_seconds = resumed["train_seconds"]
        data_wait_before = resumed["data_wait"]
    # Time steps only once the batches the workers prefetched are used up, or the rate (and so
    # the step count) would be overestimated.
    calibrate_from = args.calibration_steps // 3
    start = time.perf_counter()
    t_calibrate = start
    data_wait = data_wait_before
    stopped_early = paused = False
    snapshot: dict[str, torch.Tensor] | None = None
    snapshot_step = restored_from = 0
    step = first_step

    def training_state() -> dict[str, Any]:
        return {
            "schedule": schedule_of(args),
            "step": step,
            "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "probe": {k: v.detach().cpu() for k, v in probe.state_dict().items()},
            "rest": vocabulary.rest.detach().cpu(),
            "optimizer": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "history": history,
            "sums": {k: v.detach().cpu() for k, v in sums.items()},
            "counts": counts,
            "skipped_total": skipped_total.detach().cpu(),
            "train_seconds": earlier_seconds + time.perf_counter() - start,
            "data_wait": data_wait,
        }

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
            result = batch_loss(model, batch, processor, vocabulary, probe)
        result["objective"].backward()
        norm = torch.nn.utils.clip_grad_norm_(params, args.clip)
        # A step with a non-finite gradient is dropped (its gradient zeroed) instead of turning
        # every weight into NaN, as a bf16 run at lr 2e-3 once did. Decided on the device, so
        # the loop never waits for the GPU.
        finite = torch.isfinite(norm)
        for param in params:
            if param.grad is not None:
                param.grad = torch.where(finite, param.grad, torch.zeros_like(param.grad))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        result["grad_norm"] = torch.where(finite, norm, torch.zeros_like(norm))
        result["skipped"] = (~finite).float()
        skipped_total += result["skipped"]
        for key in sums:
            sums[key] += torch.nan_to_num(result[key].detach().float())
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
        elapsed = earlier_seconds + time.perf_counter() - start
        # A safety stop: the schedule assumed the calibrated rate, but the run must end.
        stopped_early = auto_steps and elapsed > args.time_budget + args.grace
        if step % args.log_every == 0 or step == total or stopped_early:
            entry = {
                "step": step,
                "seconds": round(elapsed, 1),
                "data_wait_s": round(data_wait, 1),
                "lr": optimizer.param_groups[0]["lr"],
                "loss": sums["loss"].item() / counts["steps"],
                "probe_loss": sums["probe_loss"].item() / counts["steps"],
                "token_acc": sums["token_hits"].item() / counts["tokens"],
                "row_acc": sums["rows_right"].item() / counts["rows"],
                "grad_norm": sums["grad_norm"].item() / counts["steps"],
                "skipped_steps": int(sums["skipped"].item()),
            }
            history.append(entry)
            broken = entry["skipped_steps"] == counts["steps"]
            print(
                f"step {step:5d}  {entry['seconds']:6.1f}s  lr {entry['lr']:.2e}  "
                f"loss {entry['loss']:.4f}  probe {entry['probe_loss']:.3f}  "
                f"token acc {entry['token_acc']:.3f}  "
                f"row acc {entry['row_acc']:.3f}  grad {entry['grad_norm']:.2f}  "
                f"skipped {entry['skipped_steps']}  data wait {entry['data_wait_s']:.0f}s",
                flush=True,
            )
            for key in sums:
                sums[key].zero_()
            counts = {"tokens": 0.0, "rows": 0.0, "steps": 0}
            if entry["skipped_steps"] == 0:
                # Insurance for a run that cannot be repeated cheaply: the last weights of a
                # clean interval, restored if every step of an interval was dropped.
                snapshot = {
                    k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()
                }
                snapshot[REST_KEY] = vocabulary.rest.detach().to("cpu", copy=True)
                snapshot_step = step
            elif broken and snapshot is not None:
                with torch.no_grad():
                    vocabulary.rest.copy_(snapshot.pop(REST_KEY))
                model.load_state_dict(snapshot)
                restored_from = snapshot_step
                print(f"training broke down: restored the weights of step {snapshot_step}")
                break
        if stopped_early:
            print(f"time budget exceeded: stopping at step {step} of {total}", flush=True)
            break
        # After the step is logged: the state holds everything up to and including it.
        if (
            state_path is not None
            and step < total
            and (step % args.save_every == 0 or time.perf_counter() - start > args.stop_after)
        ):
            save_state(state_path, training_state())
            if time.perf_counter() - start > args.stop_after:
                paused = True
                print(
                    f"stopped after {args.stop_after:g} s in this call at step {step} of "
                    f"{total}; state in {state_path}: run the same command again to resume",
                    flush=True,
                )
                break
    if device == "cuda":
        torch.cuda.synchronize()
    train_seconds = earlier_seconds + time.perf_counter() - start
    del batches  # stops the workers
    if paused:
        return {"paused": True, "steps": step, "planned_steps": total}
    if state_path is not None:
        save_state(state_path, training_state())  # step == total: a rerun only re-saves

    model.eval()
    vocabulary.write_rest(model)
    save_trained(model, tokenizer, out_dir)
    n_params = sum(p.numel() for p in model.parameters())
    return {
        "device": device,
        "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
        "cores": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "steps": step,
        "planned_steps": total,
        "stopped_early": stopped_early,
        "skipped_steps": int(skipped_total.item()),
        "restored_from_step": restored_from or None,
        "clean_steps": args.clean_steps,
        "data_wait_seconds": round(data_wait, 1),
        "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20)
        if device == "cuda"
        else None,
        "warmup_steps": warmup,
        "workers": workers,
        "train_seconds": round(train_seconds, 1),
        "samples": step * args.batch_size,
        "parameters": n_params,
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
        default=420.0,
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
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    parser.add_argument(
        "--clean-steps", type=int, default=0, help="first steps on full-size images only"
    )
    parser.add_argument(
        "--one-char-steps",
        type=int,
        default=0,
        help="first steps whose text lines hold one character (a curriculum)",
    )
    parser.add_argument(
        "--warmup", type=int, default=60, help="warm-up steps (at most a tenth of --steps)"
    )
    parser.add_argument(
        "--state",
        type=Path,
        default=None,
        help="folder for the training state: saved every --save-every steps and at "
        "--stop-after, resumed from when present (needs --steps)",
    )
    parser.add_argument("--save-every", type=int, default=500, help="steps between saved states")
    parser.add_argument(
        "--stop-after",
        type=float,
        default=math.inf,
        help="with --state: seconds of training in this call before saving and exiting "
        f"(status {EXIT_RESUME})",
    )
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--clip", type=float, default=1.0, help="gradient norm clip")
    parser.add_argument(
        "--workers", type=int, default=1, help="data workers (-1: cores - 2, for a GPU host)"
    )
    parser.add_argument("--log-every", type=int, default=25)
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
    command_started = time.perf_counter()
    raw_args = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(raw_args)
    torch.manual_seed(args.seed)
    log: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "tools.train_test_model", *raw_args]),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "arch": ARCH,
        "text_share": TEXT_SHARE,
        "max_side_mix": MAX_SIDE_MIX,
        "data": data_recipe(),
        "versions": {
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "python": sys.version.split()[0],
        },
    }
    model_dir = args.eval_only or args.out

    def write_log() -> None:
        text = json.dumps(log, indent=1) + "\n"
        if args.log_json:
            args.log_json.parent.mkdir(parents=True, exist_ok=True)
            args.log_json.write_text(text, encoding="utf-8")
        if args.eval_only is None:  # the checkpoint keeps its own provenance
            (model_dir / TRAINING_LOG).write_text(text, encoding="utf-8")

    if args.state is not None and args.steps is None:
        build_parser().error("--state needs --steps: a resumed run keeps one fixed schedule")
    if args.eval_only is None:
        log["train"] = train(args)
        if log["train"].get("paused"):
            return EXIT_RESUME
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
    log["wall_seconds"] = round(time.perf_counter() - command_started, 1)
    write_log()
    if dtypes:
        full = next(r for r in log["eval"] if r["image_max_side"] is None)
        print("full-size answers:", json.dumps(full["predictions"]))
        print(f"smoke-set accuracy (greedy, {log['eval_seconds']} s):")
        print(accuracy_table(log["eval"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
