"""Render a configuration as `lmdeploy serve api_server` (LMDeploy PyTorch engine, 0.18).

Checked against lmdeploy 0.18.0's own argument parser (tests/export/test_lmdeploy.py).
The command carries launch-time values only, so every trial measured on one launch exports the
same command. LMDeploy takes decoding settings per request, so the rest of a trial lives in the
client's request body (`Export.request`) and in the client-side image resize.
"""

from __future__ import annotations

import shlex

from ..backends.lmdeploy import FLAGS as F
from ..checkpoints.adapters import CANNOT_SERVE
from ..engine_args import render_flags
from ..errors import ExportError
from ..params import TrialConfig
from ..space.support import unsupported_reason
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
    engine_knob_notes,
    image_note,
    lever_flags,
    sampling_request,
)


def render(config: TrialConfig, opts: ServeOptions) -> Export:
    """Build the `lmdeploy serve api_server` command that serves `config`."""
    n = Notes()
    note = backend_note(config, target="LMDeploy's PyTorch engine", native="lmdeploy")
    if note:
        n.block(note)
    dtype = config.dtype
    if dtype == "float32":
        # --dtype takes auto|float16|bfloat16. The nearest command serves bfloat16, which can
        # change the answers whose accuracy the trial measured: say so, and let --strict refuse.
        dtype = "bfloat16"
        n.block(
            "LMDeploy cannot run float32, which this trial measured, so this command serves "
            "bfloat16 (`autotune verify --format lmdeploy` re-measures its accuracy)."
        )

    # --backend pytorch is explicit: the default, turbomind, cannot run Qwen3-VL and LMDeploy
    # would fall back to pytorch only after a warning.
    argv = ["lmdeploy", "serve", "api_server", _model(config, opts), *F.backend("pytorch")]
    if config.engine_defaults:
        n.add(defaults_note(shlex.join(argv)))
    else:
        argv += _tuned_flags(config, opts, n, dtype)
    if opts.adapters:
        argv += F.adapters(*adapter_specs(opts))
        n.block(
            f"{CANNOT_SERVE['lmdeploy']}: autotune did not measure this command with the "
            "adapter; serve it with swift deploy or vLLM."
        )
    argv += render_flags("lmdeploy", opts.engine_args)
    argv += address_flags(opts, host=F.server_name, port=F.server_port, name=F.model_name)
    n.add(
        *engine_knob_notes(
            config,
            engine="LMDeploy",
            graphs="CUDA graphs on",
            kernels="its PyTorch engine uses its own attention kernels",
        )
    )

    # LMDeploy has no greedy switch over HTTP (the server always sets do_sample); top_k 1 is
    # its greedy path. Without it the checkpoint's generation_config would make it sample.
    request = sampling_request(config, max_tokens_key="max_completion_tokens", greedy={"top_k": 1})
    if config.image_max_side is not None:
        n.add(image_note(config.image_max_side))
    n.add(client_note(config), *adapter_notes(opts))
    n.add(
        "LMDeploy takes decoding settings per request: send these fields in every "
        "chat-completions body (extra_body in the OpenAI client): " + compact_json(request)
    )
    if config.do_sample and None in (config.temperature, config.top_k, config.top_p):
        n.add(
            "sampling knobs the trial left unset come from the checkpoint's "
            "generation_config.json (LMDeploy's default --generation-config auto)."
        )
    return Export(format="lmdeploy", argv=argv, notes=n.notes, blockers=n.blockers, request=request)


def _tuned_flags(config: TrialConfig, opts: ServeOptions, n: Notes, dtype: str) -> list[str]:
    """The launch flags autotune sets from the configuration (none for the engine's defaults)."""
    flags: list[str] = []
    flags += F.dtype(dtype) + F.max_batch_size(batch_cap(config))
    if config.kv_quant != "none":
        flags += F.quant_policy(config.kv_quant)
        reason = unsupported_reason("lmdeploy", "kv_quant", config.kv_quant)
        if reason:
            n.block(f"kv_quant {config.kv_quant}: {reason}; check the answers first.")
    flags += lever_flags(config, F)  # prefix cache, KV share, tensor parallelism
    if config.compile_mode == "none":
        flags += F.eager_mode()  # no CUDA graphs: what compile_mode none measured
    if opts.session_len is not None:
        flags += F.session_len(opts.session_len)
    return flags


def _model(config: TrialConfig, opts: ServeOptions) -> str:
    """The checkpoint to serve: FP8 weights are the block-FP8 checkpoint LMDeploy detects from
    its config.json (the layout of Qwen's -FP8 releases)."""
    if config.weight_quant == "none":
        return opts.model
    checkpoint = opts.quantized_models.get(config.weight_quant)
    if checkpoint is None:
        raise ExportError(
            f"weight_quant {config.weight_quant} on LMDeploy serves a checkpoint in that "
            f"layout: name it in the space's quantized_checkpoints ({config.weight_quant}: "
            "Qwen/Qwen3-VL-2B-Instruct-FP8, or a local folder)"
        )
    return checkpoint
