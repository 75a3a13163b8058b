"""Render a configuration as `swift deploy` (ms-swift 4.x).

Checked against ms-swift 4.6.0: the flags are fields of `swift.arguments.DeployArguments`
(tests/export/test_export.py parses our argv with ms-swift's own parser when it is installed).

The command carries launch-time values only, so every trial measured on one launch exports
the same command; decoding, max_tokens and the image size travel in each request. ms-swift's
image bounds default to 4-16384 tokens where the checkpoint's processor says 64-16384, so the
command pins the checkpoint's (IMAGE_MIN_TOKEN_NUM / IMAGE_MAX_TOKEN_NUM): with them, the
in-process transformers engine and `swift deploy` answer alike, item by item
(tests/export/test_swift_reproduces.py).
"""

from __future__ import annotations

import shlex

from ..backends.swift import FLAGS as F
from ..engine_args import render_flags
from ..errors import ExportError
from ..params import TrialConfig
from .base import (
    Export,
    Notes,
    ServeOptions,
    adapter_notes,
    adapter_specs,
    address_flags,
    backend_note,
    batch_cap,
    client_note,
    compact_json,
    defaults_note,
    image_note,
    lever_flags,
    sampling_request,
)
from .reproduce import what_ifs

# ms-swift's model_type and template for every Qwen3-VL dense checkpoint.
MODEL_TYPE = "qwen3_vl"

# autotune's evaluation prompts carry one image and no video (as the vllm target declares).
LIMIT_MM_PER_PROMPT = {"image": 1, "video": 0}


def render(config: TrialConfig, opts: ServeOptions) -> Export:
    """Build the `swift deploy` command that serves `config`."""
    if config.backend == "lmdeploy":
        # ms-swift's lmdeploy engine needs lmdeploy < 0.9 for multimodal models and Qwen3-VL
        # needs >= 0.11, so no swift command can serve this trial.
        raise ExportError(
            "ms-swift cannot serve Qwen3-VL with its lmdeploy backend; "
            "export this lmdeploy trial with --format lmdeploy"
        )
    engine = "vllm" if config.backend == "vllm" else "transformers"
    n = Notes()
    note = _backend_note(config)
    if note and config.backend == "transformers":
        n.add(note)  # the same model and preprocessing: what the trial measured
    elif note:
        n.block(note)

    # The model type and template say which model it is, not how to serve it: kept for the
    # engine's defaults too (ms-swift matches a local folder by its architectures otherwise).
    argv = ["swift", "deploy", *F.model(opts.model)]
    argv += F.model_type(MODEL_TYPE) + F.template(MODEL_TYPE)
    if config.engine_defaults:
        n.add(defaults_note(shlex.join(argv)))
    else:
        argv += F.infer_backend(engine) + _tuned_flags(config, opts, n, engine)
    for gap in _gap_notes(config):
        n.block(gap)
    if opts.adapters:
        argv += F.adapters(*adapter_specs(opts))
    argv += render_flags("swift", opts.engine_args)
    argv += address_flags(opts, host=F.host, port=F.port, name=F.served_model_name)

    geometry = opts.image_geometry
    # What ms-swift's qwen3_vl loader reads (pixels = tokens x 32 x 32): the checkpoint
    # processor's bounds instead of qwen-vl-utils' own 4-token minimum; the engine's defaults
    # keep its own.
    env = {
        "IMAGE_MIN_TOKEN_NUM": str(geometry.min_tokens),
        "IMAGE_MAX_TOKEN_NUM": str(geometry.max_tokens),
    }
    if config.engine_defaults:
        env = {}
    if config.image_max_side is not None:
        n.add(image_note(config.image_max_side))
    n.add(client_note(config), *adapter_notes(opts))

    request = sampling_request(config, greedy={"temperature": 0})
    n.add(
        "decoding travels in each request; send these fields in every chat-completions body: "
        + compact_json(request)
    )
    if config.do_sample and config.temperature is None:
        n.add(
            "temperature is left to the checkpoint's generation_config; ms-swift samples only "
            "if that config has do_sample true (Qwen's has)."
        )
    return Export(
        format="swift",
        argv=argv,
        env=env,
        notes=n.notes,
        blockers=n.blockers,
        request=request,
    )


def _tuned_flags(config: TrialConfig, opts: ServeOptions, n: Notes, engine: str) -> list[str]:
    """The launch flags autotune sets from the configuration (none for the engine's defaults)."""
    flags: list[str] = []
    # --torch_dtype accepts bfloat16/float16/float32 only; leaving it out reads config.json,
    # which is what "auto" means.
    if config.dtype != "auto":
        flags += F.torch_dtype(config.dtype)
    if engine == "transformers":
        flags += F.attn_impl(config.attn_implementation)
        flags += F.max_batch_size(batch_cap(config))
    else:
        # --max_batch_size only drives the transformers engine; vLLM batches by max_num_seqs.
        flags += F.vllm_max_num_seqs(batch_cap(config))
        flags += F.vllm_limit_mm_per_prompt(compact_json(LIMIT_MM_PER_PROMPT))
        if config.kv_cache_fraction is not None:
            flags += F.vllm_gpu_memory_utilization(config.kv_cache_fraction)
        if opts.session_len is not None:
            flags += F.vllm_max_model_len(opts.session_len)
        if config.compile_mode == "none":
            flags += F.vllm_enforce_eager("true")  # compile_mode none = eager on vLLM
        if config.attn_implementation != "sdpa":
            n.add(
                f"attn_implementation {config.attn_implementation!r} does not apply to vLLM, "
                "which picks its own attention kernels."
            )
    return flags + lever_flags(config, F, boolean_values=True)


# The what-ifs _gap_notes explains in its own words.
_EXPLAINED = frozenset({"compile_mode", "weight_quant", "prefix_cache", "do_sample"})


def _gap_notes(config: TrialConfig) -> list[str]:
    if config.backend != "transformers":
        return []
    notes = []
    if config.compile_mode != "none":
        notes.append(
            f"compile_mode {config.compile_mode!r} (static KV cache + torch.compile) has no "
            "ms-swift flag: this server runs the model uncompiled and will be slower than "
            "measured."
        )
    if config.weight_quant != "none":
        notes.append(
            f"weight_quant {config.weight_quant} was applied in-process (transformers' "
            "FineGrainedFP8Config); no swift deploy flag quantises on load: this server runs "
            "the unquantised weights."
        )
    if config.prefix_cache:
        notes.append(
            "prefix_cache reused vision embeddings of repeated images in-process; ms-swift's "
            "transformers engine has no such cache: this server encodes every image."
        )
    if config.do_sample:
        notes.append(
            "the trial sampled in-process; ms-swift's sampler draws other random numbers, so "
            "its answers (and their accuracy) are not the trial's."
        )
    # Any other lever the table says this command does not reproduce, in the table's words.
    notes += [
        f"{why}; this server does not do the same, so its speed and answers are not the trial's."
        for name, why in what_ifs(config.model_dump(), "swift")
        if name not in _EXPLAINED
    ]
    return notes


def _backend_note(config: TrialConfig) -> str | None:
    if config.backend == "transformers":
        return (
            "measured in-process with transformers; swift deploy serves the same transformers "
            "model with the same image preprocessing (the pinned IMAGE_*_TOKEN_NUM), behind an "
            "HTTP server whose overhead the trial did not include."
        )
    return backend_note(config, target="ms-swift's vLLM engine", native="swift")
