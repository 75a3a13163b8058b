"""Render a configuration as `swift deploy` (ms-swift 4.x).

Checked against ms-swift 4.6.0: the flags are fields of `swift.arguments.DeployArguments`
(tests/test_export.py parses our argv with ms-swift's own parser when it is installed).
"""

from __future__ import annotations

from ..engine_args import render_flags
from ..errors import ExportError
from ..params import TrialConfig
from .base import (
    IMAGE_TOKEN_SIDE,
    Export,
    ServeOptions,
    backend_note,
    compact_json,
    image_note,
    image_pixel_budget,
    sampling_request,
)

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
    notes: list[str] = []
    exact = True

    note = _backend_note(config)
    if note:
        notes.append(note)
        exact = False

    argv = ["swift", "deploy", "--model", opts.model]
    argv += ["--model_type", MODEL_TYPE, "--template", MODEL_TYPE, "--infer_backend", engine]
    # --torch_dtype accepts bfloat16/float16/float32 only; leaving it out reads config.json,
    # which is what "auto" means.
    if config.dtype != "auto":
        argv += ["--torch_dtype", config.dtype]
    if engine == "transformers":
        argv += ["--attn_impl", config.attn_implementation]
        argv += ["--max_batch_size", str(config.batch_size)]
        if config.kv_cache_fraction is not None:
            notes.append("kv_cache_fraction has no effect on the transformers engine; not set.")
    else:
        # --max_batch_size only drives the transformers engine; vLLM batches by max_num_seqs.
        argv += ["--vllm_max_num_seqs", str(config.batch_size)]
        argv += ["--vllm_limit_mm_per_prompt", compact_json(LIMIT_MM_PER_PROMPT)]
        if config.kv_cache_fraction is not None:
            argv += ["--vllm_gpu_memory_utilization", str(config.kv_cache_fraction)]
        if opts.session_len is not None:
            argv += ["--vllm_max_model_len", str(opts.session_len)]
        if config.compile_mode == "none":
            argv += ["--vllm_enforce_eager", "true"]  # compile_mode none = eager on vLLM
        if config.attn_implementation != "sdpa":
            notes.append(
                f"attn_implementation {config.attn_implementation!r} does not apply to vLLM, "
                "which picks its own attention kernels."
            )

    if config.compile_mode != "none" and engine == "transformers":
        notes.append(
            f"compile_mode {config.compile_mode!r} (static KV cache + torch.compile) has no "
            "ms-swift flag: this server runs the model uncompiled and will be slower than "
            "measured."
        )
        exact = False

    argv += ["--max_new_tokens", str(config.max_new_tokens)]
    argv += _decoding_flags(config)
    argv += render_flags("swift", opts.engine_args)
    argv += ["--host", opts.host]
    if opts.port is not None:
        argv += ["--port", str(opts.port)]
    if opts.served_model_name is not None:
        argv += ["--served_model_name", opts.served_model_name]

    env: dict[str, str] = {}
    if config.image_max_side is not None:
        budget = image_pixel_budget(config.image_max_side)
        # IMAGE_MAX_TOKEN_NUM is what ms-swift's qwen3_vl loader reads (max pixels = value x
        # 32 x 32); it ignores MAX_PIXELS once that is set. MAX_PIXELS carries the same budget
        # for ms-swift versions that only know the older variable.
        env["IMAGE_MAX_TOKEN_NUM"] = str(budget // IMAGE_TOKEN_SIDE**2)
        env["MAX_PIXELS"] = str(budget)
        notes.append(image_note(config.image_max_side))

    request = sampling_request(config, greedy={"temperature": 0})
    notes.extend(_decoding_notes(config, request))
    return Export(format="swift", argv=argv, env=env, notes=notes, exact=exact, request=request)


def _backend_note(config: TrialConfig) -> str | None:
    if config.backend == "transformers":
        return (
            "measured in-process with transformers; swift deploy serves the same transformers "
            "model behind an HTTP server, whose overhead autotune did not measure."
        )
    return backend_note(config, target="ms-swift's vLLM engine", native="swift")


def _decoding_flags(config: TrialConfig) -> list[str]:
    # ms-swift turns a request's temperature 0 into do_sample=False (transformers engine) or
    # passes it to vLLM, which decodes greedily at temperature 0. The deploy flags are the
    # defaults of every request that leaves these fields out.
    flags: list[str] = []
    if not config.do_sample:
        flags += ["--temperature", "0"]
    else:
        for name in ("temperature", "top_k", "top_p"):
            value = getattr(config, name)
            if value is not None:
                flags += [f"--{name}", str(value)]
        flags += ["--seed", str(config.seed)]
    flags += ["--repetition_penalty", str(config.repetition_penalty)]
    return flags


def _decoding_notes(config: TrialConfig, request: dict[str, object]) -> list[str]:
    notes = [
        "decoding settings are server defaults: a client that sends its own temperature, "
        "top_p, top_k or max_tokens overrides them. The measured request fields: "
        + compact_json(request)
    ]
    if config.do_sample and config.temperature is None:
        notes.append(
            "temperature is left to the checkpoint's generation_config; ms-swift samples only "
            "if that config has do_sample true (Qwen's has)."
        )
    return notes
