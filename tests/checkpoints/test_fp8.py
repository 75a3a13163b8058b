"""The block-FP8 layout of Qwen's -FP8 releases, as --dummy-weights writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from autotune.checkpoints.dummy import dummy_checkpoint
from autotune.checkpoints.fp8 import BLOCK, dequantize_weight, is_quantised, quantize_weight

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny-qwen3-vl"


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


@pytest.mark.slow
def test_eval_of_lmdeploy_fp8_finds_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`autotune eval --param backend=lmdeploy --param weight_quant=fp8` needs the FP8
    checkpoint even when the space does not search FP8: built for dummy weights, else the
    space's quantized_checkpoints entry, else one line naming that field."""
    from autotune.errors import SpaceError
    from autotune.params import TrialConfig
    from autotune.space import load_space
    from autotune.study import plan_study
    from autotune.study.plan import with_checkpoint_for

    monkeypatch.setenv("AUTOTUNE_DUMMY_DIR", str(tmp_path))
    fp8 = TrialConfig(backend="lmdeploy", weight_quant="fp8")
    space = load_space("smoke")
    dummy = plan_study(space, storage_url=f"sqlite:///{tmp_path}/a.db", dummy_weights=True)
    assert dummy.quantized_paths == {}
    built = with_checkpoint_for(dummy, fp8).quantized_paths["fp8"]
    assert json.loads((Path(built) / "config.json").read_text())["quantization_config"]
    plain = plan_study(space, storage_url=f"sqlite:///{tmp_path}/b.db")
    with pytest.raises(SpaceError, match="quantized_checkpoints"):
        with_checkpoint_for(plain, fp8)
    named = space.model_copy(update={"quantized_checkpoints": {"fp8": str(built)}})
    plan = plan_study(named, storage_url=f"sqlite:///{tmp_path}/c.db")
    assert with_checkpoint_for(plan, fp8).quantized_paths == {"fp8": str(Path(built).resolve())}
    assert with_checkpoint_for(plan, TrialConfig()) is plan  # nothing to find
