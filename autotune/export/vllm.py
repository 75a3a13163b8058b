"""Render a configuration as `vllm serve` (vLLM >= 0.11; flags checked against 0.33.0 source).

Compile mapping: vLLM compiles the model and captures CUDA graphs by default. compile_mode
none is rendered as `--enforce-eager` (both off); any other value keeps vLLM's defaults, since
vLLM has no choice between torch.compile modes on its command line.
"""

from __future__ import annotations

from typing import Any

from ..engine_args import render_flags
from ..params import TrialConfig
from .base import (
    Export,
    ServeOptions,
    address_flags,
    backend_note,
    compact_json,
    engine_knob_notes,
    image_note,
    image_pixel_budget,
    sampling_request,
)

# autotune's evaluation prompts carry one image and no video; declaring that lets vLLM size
# its multimodal memory profile for one image instead of the default maximum.
LIMIT_MM_PER_PROMPT = {"image": 1, "video": 0}


def render(config: TrialConfig, opts: ServeOptions) -> Export:
    """Build the `vllm serve` command that serves `config`."""
    notes: list[str] = []
    exact = True
    note = backend_note(config, target="vLLM", native="vllm")
    if note:
        notes.append(note)
        exact = False

    argv = ["vllm", "serve", opts.model, "--dtype", config.dtype]
    argv += ["--max-num-seqs", str(config.batch_size)]
    # For vLLM the fraction is the instance's share of total GPU memory (weights included),
    # the value the trial passed with this same flag.
    if config.kv_cache_fraction is not None:
        argv += ["--gpu-memory-utilization", str(config.kv_cache_fraction)]
    if opts.session_len is not None:
        argv += ["--max-model-len", str(opts.session_len)]
    if config.compile_mode == "none":
        argv += ["--enforce-eager"]  # no compile, no CUDA graphs: what compile_mode none means
    argv += ["--limit-mm-per-prompt", compact_json(LIMIT_MM_PER_PROMPT)]
    if config.image_max_side is not None:
        budget = image_pixel_budget(config.image_max_side)
        argv += ["--mm-processor-kwargs", compact_json({"max_pixels": budget})]
        notes.append(image_note(config.image_max_side))

    generation_source, overrides = _generation_config(config)
    argv += ["--generation-config", generation_source]
    argv += ["--override-generation-config", compact_json(overrides)]
    if config.do_sample:
        argv += ["--seed", str(config.seed)]
    argv += render_flags("vllm", opts.engine_args)
    argv += address_flags(opts, host="--host", port="--port", name="--served-model-name")
    notes += engine_knob_notes(
        config,
        engine="vLLM",
        graphs="torch.compile and CUDA graphs",
        kernels="vLLM picks its own attention kernels",
    )
    request = sampling_request(config, greedy={"temperature": 0})
    notes.append(
        "decoding settings are server defaults (--override-generation-config): a client that "
        "sends its own sampling fields overrides them, and max_tokens can only go lower. The "
        "measured request fields: " + compact_json(request)
    )
    if generation_source == "auto":
        notes.append(
            "sampling knobs the trial left unset come from the checkpoint's "
            "generation_config.json, as they did in the trial."
        )
    return Export(format="vllm", argv=argv, notes=notes, exact=exact, request=request)


def _generation_config(config: TrialConfig) -> tuple[str, dict[str, Any]]:
    """vLLM's default-sampling source and the overrides that make it the trial's decoding.

    With "vllm" the server ignores the checkpoint's generation_config.json, so the overrides are
    the whole story. A sampled trial that left a knob unset used the checkpoint's value, so
    then the checkpoint file must stay in ("auto").
    """
    overrides: dict[str, Any] = {}
    if config.do_sample:
        for name in ("temperature", "top_k", "top_p"):
            value = getattr(config, name)
            if value is not None:
                overrides[name] = value
    else:
        overrides["temperature"] = 0.0  # vLLM decodes greedily at temperature 0
    overrides["repetition_penalty"] = config.repetition_penalty
    overrides["max_new_tokens"] = config.max_new_tokens
    unset = config.do_sample and any(
        getattr(config, name) is None for name in ("temperature", "top_k", "top_p")
    )
    return ("auto" if unset else "vllm"), overrides
