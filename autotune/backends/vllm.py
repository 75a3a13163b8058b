"""vLLM's `vllm serve` (0.11 and later).

`--quantization fp8` quantises the weights on load; `--kv-cache-dtype` takes auto or fp8
variants, no int8 or int4. Prefix caching is on by default and its multimodal processor cache
(`--mm-processor-cache-gb`, 4 GiB) keeps decoded images.
"""

from autotune.backends.base import Backend

_TP = "the tensor_parallel parameter (GPUs handed out by autotune run --gpus)"
_ADAPTERS = "autotune --adapter NAME=PATH"

BACKEND = Backend(
    name="vllm",
    # vLLM picks its own attention backend: no attn_implementation to choose.
    lacks=frozenset({"attn_implementation"}),
    startup_guess_s=120.0,
    server=True,
    deploy_command="vllm serve",
    deploys=frozenset({"vllm"}),
    package="vllm",
    module="vllm",
    program="vllm",
    install_hint="pip install 'autotune[vllm]'",
    renderer="autotune.export.vllm:render",
    length_fields=("max_tokens", "min_tokens"),
    reserved_flags={
        "model": "the model (--model)",
        "dtype": "the dtype parameter",
        "max-num-seqs": "the max_batch_size parameter",
        "gpu-memory-utilization": "the kv_cache_fraction parameter",
        "enforce-eager": "the compile_mode parameter (none = eager, else compile + CUDA graphs)",
        "limit-mm-per-prompt": "autotune (one image per prompt)",
        "tensor-parallel-size": _TP,
        "tp": _TP,
        "quantization": "the weight_quant parameter",
        "kv-cache-dtype": "the kv_quant parameter",
        "enable-prefix-caching": "the prefix_cache parameter",
        "no-enable-prefix-caching": "the prefix_cache parameter",
        "mm-processor-cache-gb": "the prefix_cache parameter (0 when off)",
        "enable-lora": _ADAPTERS,
        "lora-modules": _ADAPTERS,
        "max-lora-rank": f"{_ADAPTERS} (the adapters' largest rank)",
        "mm-processor-kwargs": "the checkpoint's image processor (image_max_side resizes "
        "client-side)",
        "override-generation-config": "the decoding parameters (sent in every request)",
        "host": "autotune (--host)",
        "port": "autotune (--port)",
        "served-model-name": "autotune (served model name)",
    },
    session_len_flag="max-model-len",
    unsupported={
        "kv_quant": {
            "int8": "vLLM's --kv-cache-dtype has no int8 (auto or fp8 only)",
            "int4": "vLLM's --kv-cache-dtype has no int4 (auto or fp8 only)",
        }
    },
    cuda_only={"weight_quant": {"fp8": "vLLM's FP8 kernels need a CUDA GPU"}},
)
