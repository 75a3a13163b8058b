"""Training data for tools/train_test_model.py: the smoke set's items, as the engine sees them.

Example `i` of a run depends only on (seed, i), so any number of DataLoader workers yields the
same stream. Workers build whole batches (processor, labels, 3D rope positions) and hand over
uint8 pixels; `finish_pixels` does the processor's rescale/normalise on the GPU.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image
from transformers import Qwen3VLModel

from autotune.checkpoints.geometry import ImageGeometry
from autotune.evalset.images import resize_to_max_side
from tools import make_evalset, synth
from tools.synth.scenes import COLOURS, SHAPES

IM_END = "<|im_end|>"
TEXT_SHARE = 0.75  # the rest are shape strips, half count and half colour questions
# (image max side, probability): the engine's downscaling. Three in ten examples keep full
# size, where a glyph cell covers 2 x 2 vision tokens; the rest are shrunk down to side 48,
# where a cell is 6 px and four share a token, so the reader learns to read as far as the
# pixels allow: the smoke set's print runs from 24 to 80 px, and the smaller it is, the larger
# the side it needs. Accuracy then falls with the side gradually (the model card's table):
# the floor has a shrunk side that pays and graded drops to decide (issue 38). Side 32
# (4 px cells) is never shown: nothing there is legible.
MAX_SIDE_MIX: tuple[tuple[int | None, float], ...] = (
    (None, 0.3),
    (256, 0.12),
    (192, 0.08),
    (128, 0.12),
    (112, 0.06),
    (96, 0.1),
    (80, 0.06),
    (64, 0.1),
    (48, 0.06),
)
# The reader's processor enlarges an image to at least 4 vision tokens, not the released
# model's 64: a smaller image then costs fewer tokens, so image size is a real speed trade-off
# on the CPU, and a full-size smoke item costs 32 tokens to train on. Exports pin it
# (IMAGE_MIN_TOKEN_NUM=4), so every engine sees the same pixels.
READER_MIN_PIXELS = 1 * 32 * 32
READER_GEOMETRY = ImageGeometry(min_pixels=READER_MIN_PIXELS)


NO_CELL_LABEL = -100  # cross_entropy's ignore_index
# What the glyph probe names at each vision token: a glyph, a coloured shape, or nothing.
PROBE_CLASSES: tuple[str, ...] = (
    *synth.SMOKE_GLYPHS,
    *(f"{colour} {shape}" for shape in sorted(SHAPES) for colour in sorted(COLOURS)),
    "blank",
)


@dataclass(frozen=True)
class Example:
    image: Image.Image
    prompt: str
    answer: str
    max_side: int | None
    # Per vision token (row-major), per slot, the index in PROBE_CLASSES of what it shows:
    # the probe's targets, at full size and shrunk alike.
    cells: list[list[int]] | None = None


# Each vision token's probe reads two slots, its left and its right half: shrunk, two glyphs
# share a token (at side 128, one in each half), and the probe teaches the encoder to keep
# both apart. A slot two glyphs fall in is left unlabelled (far shrunk: nothing to learn
# there, which is where the reader should fail).
PROBE_SLOTS = 2
TOKEN_PX = READER_GEOMETRY.factor  # one vision token: patch 16 x merge 2


def _object_cells(
    centres: Sequence[tuple[float, float, int]], image: Image.Image
) -> list[list[int]]:
    """Per vision token of `image`, the probe class in each slot, from the objects' centres
    (x, y on the full-size canvas, class): each object fills its layout cell, scaled to the
    image as the engine resized it. A slot shows an object when the slot's centre lies in the
    object's cell (at full size a glyph covers 2 x 2 tokens, so 8 slots); far shrunk, where a
    cell is narrower than a slot, the slot holding the object's centre."""
    width, height = make_evalset.SMOKE_CANVAS
    sx, sy = image.width / width, image.height / height
    half_w, half_h = make_evalset.SMOKE_CELL * sx / 2, make_evalset.SMOKE_CELL * sy / 2
    columns, rows = image.width // TOKEN_PX, image.height // TOKEN_PX
    slot_px = TOKEN_PX / PROBE_SLOTS
    blank = len(PROBE_CLASSES) - 1
    cells = [[blank] * PROBE_SLOTS for _ in range(columns * rows)]
    shown: dict[tuple[int, int], set[int]] = {}
    for x0, y0, label in centres:
        x, y = x0 * sx, y0 * sy
        covered = {
            (row * columns + column, slot)
            for row in range(rows)
            if y - half_h <= (row + 0.5) * TOKEN_PX < y + half_h
            for column in range(columns)
            for slot in range(PROBE_SLOTS)
            if x - half_w <= column * TOKEN_PX + (slot + 0.5) * slot_px < x + half_w
        }
        if not covered:
            column, row = min(int(x // TOKEN_PX), columns - 1), min(int(y // TOKEN_PX), rows - 1)
            slot = min(int((x % TOKEN_PX) // slot_px), PROBE_SLOTS - 1)
            covered = {(row * columns + column, slot)}
        for key in covered:
            shown.setdefault(key, set()).add(label)
    for (token, slot), labels in shown.items():
        cells[token][slot] = next(iter(labels)) if len(labels) == 1 else NO_CELL_LABEL
    return cells


def glyph_cells(answer: str, image: Image.Image) -> list[list[int]]:
    """What each vision token of a smoke code shows, per slot (make_evalset's layout), at
    whatever size the image reached the engine."""
    cell = make_evalset.SMOKE_CELL
    rows = make_evalset.SMOKE_CANVAS[1] // cell
    y0 = (rows // 2 + 0.5) * cell
    centres = [
        ((make_evalset.SMOKE_FIRST_CELL + k + 0.5) * cell, y0, PROBE_CLASSES.index(glyph))
        for k, glyph in enumerate(answer)
    ]
    return _object_cells(centres, image)


def shape_cells(meta: dict[str, Any], image: Image.Image) -> list[list[int]]:
    """What each vision token of a shape strip shows, per slot (shapes_row's meta)."""
    cell = make_evalset.SMOKE_CELL
    columns = make_evalset.SMOKE_CANVAS[0] // cell
    centres = [
        ((token % columns + 0.5) * cell, (token // columns + 0.5) * cell, PROBE_CLASSES.index(name))
        for token, name in zip(meta["cells"], meta["objects"], strict=True)
    ]
    return _object_cells(centres, image)


def training_example(
    seed: int, index: int, *, downscale: bool = True, one_char: bool = False
) -> Example:
    """Example `index` of the stream; it depends on (seed, index) only, not on worker layout.

    Without `downscale` the image keeps its full size (the first steps learn to read on
    clean images; shrunken ones only add noise before the model can read at all). With
    `one_char` text lines hold one character (the curriculum of the first steps).
    """
    rng = random.Random(f"train-{seed}/{index}")
    # The smoke set's own item makers, so training follows any change to that set; only the
    # font size is drawn, over the smoke set's whole range.
    text = rng.random() < TEXT_SHARE
    if text:
        font_px = rng.randint(*make_evalset.SMOKE_FONT_PX)
        item = make_evalset._smoke_line(rng, font_px=font_px, length=1 if one_char else None)
    else:
        item = make_evalset._smoke_scene(rng, question=rng.choice(("count", "colour")))
    sides, weights = zip(*MAX_SIDE_MIX, strict=True)
    max_side = rng.choices(sides, weights)[0] if downscale else None
    # As autotune's engine prepares images: the client-side resize, then the processor's grid
    # (qwen-vl-utils' bicubic resize), so training sees the pixels serving will.
    image = READER_GEOMETRY.fit(resize_to_max_side(item.image.convert("RGB"), max_side))
    # answers[0] is the canonical form: the digit for counts, the first colour name.
    answer = item.answers[0]
    cells = glyph_cells(answer, image) if text else shape_cells(item.meta, image)
    return Example(image, item.prompt, answer, max_side, cells)


def data_recipe() -> dict[str, Any]:
    """What the training items are made of, for the run's log and the model card."""
    return {
        "line_length": make_evalset.SMOKE_LINE_LENGTH,
        "line_alphabet": synth.SMOKE_GLYPHS,
        "line_fonts": make_evalset.SMOKE_LINE_FONTS,
        "font_px": make_evalset.SMOKE_FONT_PX,
        "canvas": make_evalset.SMOKE_CANVAS,
        "cell": make_evalset.SMOKE_CELL,
        "object_px": make_evalset.SMOKE_OBJECT_PX,
    }


def prompt_text(processor: Any, prompt: str) -> str:
    """The chat prompt exactly as TransformersEngine renders it."""
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


class TrainBatches(torch.utils.data.Dataset):
    """Batch `step` holds examples step*B .. step*B+B-1; workers build whole batches.

    Pixels leave the worker as uint8 and one temporal frame (the processor repeats each image
    twice for temporal_patch_size 2): a quarter of the float bytes to move; the GPU finishes.
    """

    def __init__(
        self,
        processor: Any,
        config: Any,
        *,
        seed: int,
        batch_size: int,
        steps: int,
        clean_steps: int = 0,
        one_char_steps: int = 0,
        start: int = 0,
    ):
        self.processor = processor
        self.config = config
        self.seed = seed
        self.clean_steps = clean_steps
        self.one_char_steps = one_char_steps
        self.batch_size = batch_size
        self.steps = steps
        self.start = start  # a resumed run goes on from its data position
        self._rope: Qwen3VLModel | None = None

    def __len__(self) -> int:
        return max(0, self.steps - self.start)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        step = self.start + index  # counts from 0 here
        first = step * self.batch_size
        examples = [
            training_example(
                self.seed,
                first + i,
                downscale=step >= self.clean_steps,
                one_char=step < self.one_char_steps,
            )
            for i in range(self.batch_size)
        ]
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
        tokens = (enc["image_grid_thw"].prod(-1) // image_processor.merge_size**2).tolist()
        cell_labels = [
            torch.tensor(ex.cells) if ex.cells else torch.full((n, PROBE_SLOTS), NO_CELL_LABEL)
            for ex, n in zip(examples, tokens, strict=True)
        ]
        if any(len(c) != n for c, n in zip(cell_labels, tokens, strict=True)):
            raise RuntimeError("glyph cells do not match the image's vision tokens")
        return {
            "cell_labels": torch.cat(cell_labels),
            "input_ids": ids,
            "attention_mask": enc["attention_mask"],
            "position_ids": positions,
            "pixel_values": patches[:, :, 0].contiguous(),
            "image_grid_thw": enc["image_grid_thw"],
            "target_index": target_index,
            "predict_index": target_index - 1,
            "target_rows": target_index // ids.shape[1],
        }


def worker_init(_: int) -> None:
    torch.set_num_threads(1)  # many workers, one core each


def finish_pixels(patches: torch.Tensor, processor: Any) -> torch.Tensor:
    """uint8 single-frame patches -> the processor's float pixel_values, on patches' device."""
    ip = processor.image_processor
    mean = torch.tensor(ip.image_mean, device=patches.device).view(1, -1, 1)
    std = torch.tensor(ip.image_std, device=patches.device).view(1, -1, 1)
    x = (patches.float() * ip.rescale_factor - mean) / std
    n, channels, pixels = x.shape
    return x.unsqueeze(2).expand(n, channels, ip.temporal_patch_size, pixels).reshape(n, -1)
