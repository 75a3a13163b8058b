"""What each engine supports for Qwen3-VL, value by value, and why not where it does not.

A space may list quantisation or cache values that only some backends serve. The study never
proposes an unsupported combination (autotune.space.sampling.searched narrows the
choices per backend) and lists each one once, with the reason below, in the run's notes.

Checked at these versions (the sources, not only the documentation):
- LMDeploy 0.18, PyTorch engine: FP8 weights load from a block-FP8 checkpoint (config.json
  `quantization_config.quant_method: fp8` with `weight_block_size`, the layout of Qwen's
  `-FP8` releases). `--quant-policy` parses none/int4/int8/fp8/fp8_e5m2/turbo_quant for any
  model, but LMDeploy's supported-models table marks KV int8 and int4 "No" for Qwen3-VL and
  lists no FP8 KV cache for it: autotune does not measure what the engine does not claim.
  `--enable-prefix-caching` applies to Qwen3-VL (image hashes are part of the block keys).
- vLLM (0.11 and later): `--quantization fp8` quantises the weights on load; `--kv-cache-dtype`
  takes auto or fp8 variants, no int8 or int4. Prefix caching is on by default and its
  multimodal processor cache (`--mm-processor-cache-gb`, 4 GiB) keeps decoded images.
- transformers 5.x in-process: `FineGrainedFP8Config` (block FP8, 128 x 128) quantises on
  load, on CUDA only; its quantised KV caches need optimum-quanto or HQQ, which no deploy
  target serves. Both are what-ifs: no `swift deploy` flag reproduces them.
"""

from __future__ import annotations

from typing import Any

from autotune.backends import BACKENDS
from autotune.params import BACKEND_PARAMS

# Servers whose requests can force an answer's exact length (a minimum number of tokens and
# ignore_eos), so load tests do equal work (each engine's `forces_length`); autotune.export
# renders each one's fields.
LENGTH_FORCING_SERVERS = frozenset(name for name, b in BACKENDS.items() if b.forces_length)


def can_force_length(fmt: str) -> bool:
    return fmt in LENGTH_FORCING_SERVERS


# (backend, parameter) -> {unsupported value: reason}. A value not listed is supported.
_UNSUPPORTED: dict[tuple[str, str], dict[Any, str]] = {
    ("lmdeploy", "kv_quant"): {
        "int8": "LMDeploy 0.18's supported-models table marks KV int8 'No' for Qwen3-VL",
        "int4": "LMDeploy 0.18's supported-models table marks KV int4 'No' for Qwen3-VL",
        "fp8": "LMDeploy 0.18's supported-models table lists no FP8 KV cache for Qwen3-VL",
    },
    ("vllm", "kv_quant"): {
        "int8": "vLLM's --kv-cache-dtype has no int8 (auto or fp8 only)",
        "int4": "vLLM's --kv-cache-dtype has no int4 (auto or fp8 only)",
    },
    ("transformers", "kv_quant"): {
        value: "transformers' quantised KV caches need optimum-quanto or HQQ, and no deploy "
        "target serves them"
        for value in ("int8", "int4", "fp8")
    },
}

# Values that need a CUDA GPU whatever the engine's version.
_CUDA_ONLY: dict[tuple[str, str], dict[Any, str]] = {
    ("transformers", "weight_quant"): {
        "fp8": "transformers' FineGrainedFP8Config runs on CUDA GPUs only"
    },
    ("lmdeploy", "weight_quant"): {"fp8": "LMDeploy's FP8 kernels need a CUDA GPU"},
    ("vllm", "weight_quant"): {"fp8": "vLLM's FP8 kernels need a CUDA GPU"},
}


def unsupported_reason(backend: str, name: str, value: Any, *, device: str = "auto") -> str | None:
    """Why `backend` cannot serve Qwen3-VL with `name=value` (on `device`), or None if it can."""
    reason = _UNSUPPORTED.get((backend, name), {}).get(value)
    if reason is None and device == "cpu":
        reason = _CUDA_ONLY.get((backend, name), {}).get(value)
    return reason


def supported_choices(backend: str, name: str, choices: list[Any], *, device: str) -> list[Any]:
    """The choices `backend` can serve, in their order."""
    return [v for v in choices if unsupported_reason(backend, name, v, device=device) is None]


# The parameters this module judges, and their plain value (which every backend serves).
PLAIN: dict[str, Any] = {"weight_quant": "none", "kv_quant": "none", "prefix_cache": False}


def config_problems(values: dict[str, Any], *, device: str = "auto") -> list[str]:
    """One line per value of a configuration its backend cannot serve."""
    backend = str(values.get("backend"))
    problems = []
    for name, plain in PLAIN.items():
        value = values.get(name, plain)
        if value == plain:
            continue
        if name not in BACKEND_PARAMS.get(backend, frozenset()):
            problems.append(f"{name} {value} on {backend}: the {backend} backend has no {name}")
            continue
        reason = unsupported_reason(backend, name, value, device=device)
        if reason is not None:
            problems.append(f"{name} {value} on {backend}: {reason}")
    return problems
