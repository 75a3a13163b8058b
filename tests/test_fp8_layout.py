"""The block-FP8 layout of Qwen's -FP8 releases, as --dummy-weights writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from autotune.checkpoints.dummy import dummy_checkpoint
from autotune.checkpoints.fp8 import BLOCK, dequantize_weight, is_quantised, quantize_weight

TINY = Path(__file__).resolve().parent.parent / "models" / "tiny-qwen3-vl"


@pytest.mark.parametrize("shape", [(256, 384), (130, 70), (2048, 6144)])
def test_a_weight_comes_back_within_fp8_precision(shape: tuple[int, int]) -> None:
    torch.manual_seed(0)
    weight = torch.randn(shape) * 0.02
    weight[0, 0] = 0.5  # one outlier only coarsens its own block
    fp8, scale_inv = quantize_weight(weight)
    assert fp8.dtype == torch.float8_e4m3fn and fp8.shape == weight.shape
    assert scale_inv.dtype == torch.float32
    assert scale_inv.shape == (-(-shape[0] // BLOCK), -(-shape[1] // BLOCK))
    back = dequantize_weight(fp8, scale_inv)
    # e4m3 keeps 3 mantissa bits: a relative error of at most 2^-4 per element.
    assert torch.all((back - weight).abs() <= weight.abs() * 2**-4 + 1e-6)


def test_only_the_decoder_projections_are_quantised() -> None:
    assert is_quantised("model.language_model.layers.3.self_attn.q_proj.weight")
    assert is_quantised("model.language_model.layers.0.mlp.down_proj.weight")
    assert not is_quantised("model.visual.blocks.0.attn.qkv.weight")
    assert not is_quantised("model.language_model.layers.0.input_layernorm.weight")
    assert not is_quantised("lm_head.weight")
    assert not is_quantised("model.language_model.embed_tokens.weight")


@pytest.mark.slow
def test_dummy_weights_in_the_fp8_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_DUMMY_DIR", str(tmp_path))
    plain = Path(dummy_checkpoint(str(TINY), device="cpu"))
    fp8 = Path(dummy_checkpoint(str(TINY), device="cpu", layout="fp8"))
    assert fp8 != plain  # one cache folder per layout
    config = json.loads((fp8 / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "fp8"
    assert config["quantization_config"]["weight_block_size"] == [BLOCK, BLOCK]
    assert "quantization_config" not in json.loads((plain / "config.json").read_text())
    quantised = 0
    with (
        safe_open(fp8 / "model.safetensors", "pt") as q,
        safe_open(plain / "model.safetensors", "pt") as p,
    ):
        for name in p.keys():  # noqa: SIM118 (safe_open is not a mapping)
            if is_quantised(name):
                quantised += 1
                weight = q.get_tensor(name)
                assert weight.dtype == torch.float8_e4m3fn
                back = dequantize_weight(weight, q.get_tensor(name + "_scale_inv"))
                original = p.get_tensor(name).float()
                assert torch.all((back - original).abs() <= original.abs() * 2**-4 + 1e-6)
            else:
                assert q.get_tensor(name).dtype == p.get_tensor(name).dtype, name
    assert quantised > 0
