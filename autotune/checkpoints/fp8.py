"""The block-FP8 checkpoint layout of Qwen's -FP8 releases, written from bf16 weights.

Qwen publishes FP8 checkpoints (e.g. Qwen/Qwen3-VL-2B-Instruct-FP8) in the layout DeepSeek
introduced and LMDeploy, vLLM and transformers read: every linear weight of the language
model's decoder layers is float8_e4m3fn, with a float32 `weight_scale_inv` holding one
dequantisation factor per 128 x 128 block; the vision tower, the embeddings, the norms and
lm_head stay in bf16, and config.json says so in its `quantization_config`. This module writes
that layout for `--dummy-weights` (random weights, so speed and memory can be measured without
the release); tests/checkpoints/test_fp8.py checks that dequantising gives the weights back.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

BLOCK = 128
FP8_MAX = 448.0  # the largest float8_e4m3fn value

QUANTIZATION_CONFIG: dict[str, Any] = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [BLOCK, BLOCK],
    "modules_to_not_convert": ["lm_head", "model.visual", "visual"],
}

# The decoder layers' projections: what the -FP8 releases quantise.
_QUANTISED = re.compile(
    r"(^|\.)language_model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$"
)


def is_quantised(name: str) -> bool:
    """Whether tensor `name` is stored in FP8 in this layout."""
    return bool(_QUANTISED.search(name))


def quantize_weight(weight: Any) -> tuple[Any, Any]:
    """(float8_e4m3fn weight, float32 scale_inv per 128 x 128 block) of a 2-D weight."""
    import torch

    rows, cols = weight.shape
    pad_r, pad_c = -rows % BLOCK, -cols % BLOCK
    padded = torch.nn.functional.pad(weight.float(), (0, pad_c, 0, pad_r))
    blocks = padded.reshape(padded.shape[0] // BLOCK, BLOCK, padded.shape[1] // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale = amax / FP8_MAX
    quantised = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    fp8 = quantised.reshape(padded.shape)[:rows, :cols].to(torch.float8_e4m3fn)
    return fp8.contiguous(), scale.contiguous()


def dequantize_weight(fp8: Any, scale_inv: Any) -> Any:
    """The float32 weight a reader of the layout computes back."""
    expanded = scale_inv.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    return fp8.float() * expanded[: fp8.shape[0], : fp8.shape[1]]


def quantize_checkpoint(folder: Path) -> int:
    """Rewrite the safetensors files of `folder` in place, in the block-FP8 layout; the
    number of weights quantised."""
    from safetensors.torch import load_file, save_file

    index_file = folder / "model.safetensors.index.json"
    index = json.loads(index_file.read_text(encoding="utf-8")) if index_file.is_file() else None
    count = 0
    for path in sorted(folder.glob("*.safetensors")):
        tensors = load_file(path)
        out: dict[str, Any] = {}
        for name, tensor in tensors.items():
            if is_quantised(name) and tensor.dim() == 2:
                out[name], out[name + "_scale_inv"] = quantize_weight(tensor)
                if index is not None:
                    index["weight_map"][name + "_scale_inv"] = path.name
                count += 1
            else:
                out[name] = tensor
        save_file(out, path, metadata={"format": "pt"})
    if index is not None:
        index_file.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return count
