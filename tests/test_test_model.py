"""The bundled test model reads: the smoke set right at full size, wrong once shrunk to 64.

Without that, every configuration scores the same and the accuracy floor protects nothing.
The answers come through autotune's own engine path (chat template, processor, left padding,
greedy), the path every trial uses, in float32 and in bfloat16, at every image max side the
smoke space searches (issue 28: at least 0.9 at full size, at most 0.3 at side 64, and never
more accurate for a smaller image).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
REPO = MODEL.parents[1]
SIDES = (None, 256, 128, 64)  # the smoke space's image_max_side choices, largest first
DTYPES = ("float32", "bfloat16")


def accuracy(evalset: EvalSet, image_max_side: int | None, dtype: str) -> float:
    config = TrialConfig(
        dtype=dtype, image_max_side=image_max_side, batch_size=8, max_new_tokens=16
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


@pytest.fixture(scope="module")
def curve() -> dict[tuple[str, int | None], float]:
    """Smoke-set accuracy per (dtype, image max side)."""
    torch.set_num_threads(min(2, torch.get_num_threads()))  # CI machines have 2 cores
    smoke = load_evalset("smoke")
    return {(dtype, side): accuracy(smoke, side, dtype) for dtype in DTYPES for side in SIDES}


def test_loads_as_a_qwen3_vl_with_the_real_ids() -> None:
    processor = AutoProcessor.from_pretrained(MODEL)
    model = AutoModelForImageTextToText.from_pretrained(MODEL)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert model.get_input_embeddings().weight.shape[0] == 151936
    assert model.config.image_token_id == 151655
    assert processor.image_processor.patch_size == 16
    assert processor.image_processor.merge_size == 2
    # The reader's one departure: 4 vision tokens at least, so a smaller image costs less.
    assert processor.image_processor.size["shortest_edge"] == 4 * 32 * 32
    assert processor.tokenizer.convert_tokens_to_ids("<|im_end|>") == 151645


def test_folder_stays_under_40_mb() -> None:
    size = sum(f.stat().st_size for f in MODEL.iterdir() if f.is_file())
    assert size < 40e6, f"{MODEL} holds {size / 1e6:.1f} MB"


@pytest.mark.parametrize("dtype", DTYPES)
def test_reads_the_smoke_set_at_full_size(
    curve: dict[tuple[str, int | None], float], dtype: str
) -> None:
    assert curve[(dtype, None)] >= 0.9, curve


@pytest.mark.parametrize("dtype", DTYPES)
def test_cannot_read_it_shrunk_to_64(
    curve: dict[tuple[str, int | None], float], dtype: str
) -> None:
    assert curve[(dtype, 64)] <= 0.3, curve


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_smaller_image_is_never_read_better(
    curve: dict[tuple[str, int | None], float], dtype: str
) -> None:
    accuracies = [curve[(dtype, side)] for side in SIDES]
    assert accuracies == sorted(accuracies, reverse=True), dict(zip(SIDES, accuracies, strict=True))


def test_autotune_eval_reports_the_reading(tmp_path: Path) -> None:
    """The user's command, `autotune eval --space smoke --json`, on the shipped model."""
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "eval", "--space", "smoke", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["accuracy"] >= 0.9, report
