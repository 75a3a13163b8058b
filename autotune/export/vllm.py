"""Render a configuration as `vllm serve` (vLLM >= 0.11; flags checked against 0.33.0 source).

The command carries launch-time values only; decoding and max_tokens travel in each request
(vLLM's default --generation-config auto fills what a request leaves out from the checkpoint,
as the in-process engine does), and the image size is a client-side resize.

Compile mapping: vLLM compiles the model and captures CUDA graphs by default. compile_mode
none is rendered as `--enforce-eager` (both off); any other value keeps vLLM's defaults, since
vLLM has no choice between torch.compile modes on its command line.
"""

from __future__ import annotations

import shlex

from ..backends.vllm import FLAGS as F
from ..engine_args import render_flags
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

# autotune's evaluation prompts carry one image and no video; declaring that lets vLLM size
# its multimodal memory profile for one image instead of the default maximum.
LIMIT_MM_PER_PROMPT = {"image": 1, "video": 0}

# The values vLLM's --max-lora-rank accepts.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_rank_flag(opts: ServeOptions) -> int:
    """The smallest --max-lora-rank that holds every adapter's rank."""
    largest = max(adapter.rank for adapter in opts.adapters)
    return next((rank for rank in LORA_RANKS if rank >= largest), LORA_RANKS[-1])


def render(config: TrialConfig, opts: ServeOptions) -> Export:
    """Build the `vllm serve` command that serves `config`."""
    n = Notes()
    note = backend_note(config, target="vLLM", native="vllm")
    if note:
        n.block(note)

    argv = ["vllm", "serve", opts.model]
    if config.engine_defaults:
        n.add(defaults_note(shlex.join(argv)))
    else:
        argv += _tuned_flags(config, opts, n)
    if opts.adapters:
        argv += F.enable_lora() + F.max_lora_rank(lora_rank_flag(opts))
        argv += F.lora_modules(*adapter_specs(opts))
    if not config.engine_defaults:
        argv += F.limit_mm_per_prompt(compact_json(LIMIT_MM_PER_PROMPT))
    argv += render_flags("vllm", opts.engine_args)
    argv += address_flags(opts, host=F.host, port=F.port, name=F.served_model_name)
    n.add(
        *engine_knob_notes(
            config,
            engine="vLLM",
            graphs="torch.compile and CUDA graphs",
            kernels="vLLM picks its own attention kernels",
        )
    )
    if config.image_max_side is not None:
        n.add(image_note(config.image_max_side))
    n.add(client_note(config), *adapter_notes(opts))
    request = sampling_request(config, greedy={"temperature": 0})
    n.add(
        "decoding travels in each request; send these fields in every chat-completions body: "
        + compact_json(request)
    )
    if config.do_sample and None in (config.temperature, config.top_k, config.top_p):
        n.add(
            "sampling knobs the trial left unset come from the checkpoint's "
            "generation_config.json (vLLM's default --generation-config auto)."
        )
    return Export(format="vllm", argv=argv, notes=n.notes, blockers=n.blockers, request=request)


def _tuned_flags(config: TrialConfig, opts: ServeOptions, n: Notes) -> list[str]:
    """The launch flags autotune sets from the configuration (none for the engine's defaults)."""
    flags = F.dtype(config.dtype) + F.max_num_seqs(batch_cap(config))
    # KV share and tensor parallelism. For vLLM the fraction is the instance's share of total
    # GPU memory (weights included), the value the trial passed with this same flag.
    flags += lever_flags(config, F)
    if opts.session_len is not None:
        flags += F.max_model_len(opts.session_len)
    if config.compile_mode == "none":
        flags += F.enforce_eager()  # no compile, no CUDA graphs: what compile_mode none means
    if config.weight_quant == "fp8":
        flags += F.quantization("fp8")  # the bf16 weights, quantised on load
    if config.kv_quant == "fp8":
        flags += F.kv_cache_dtype("fp8")
    elif config.kv_quant != "none":
        n.block(
            f"kv_quant {config.kv_quant}: {unsupported_reason('vllm', 'kv_quant', config.kv_quant)}"
            "; this command keeps the KV cache in the model's dtype."
        )
    # Explicit both ways: vLLM caches prefixes and decoded images by default, and a trial
    # without the cache measured neither.
    if config.prefix_cache:
        flags += F.enable_prefix_caching()
    else:
        flags += F.no_enable_prefix_caching() + F.mm_processor_cache_gb(0)
    return flags
