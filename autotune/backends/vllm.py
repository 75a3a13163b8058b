"""vLLM's `vllm serve` (0.11 and later).

`--quantization fp8` quantises the weights on load; `--kv-cache-dtype` takes auto or fp8
variants, no int8 or int4. Prefix caching is on by default and its multimodal processor cache
(`--mm-processor-cache-gb`, 4 GiB) keeps decoded images.
"""

from autotune.backends.base import Backend, Flag, FlagTable

_TP = "the tensor_parallel parameter (GPUs handed out by autotune run --gpus)"
_ADAPTERS = "autotune --adapter NAME=PATH"
_PREFIX_CACHE = "the prefix_cache parameter"


class VllmFlags(FlagTable):
    """`vllm serve`'s flags that autotune renders or reserves."""

    model = Flag("model", "the model (--model)")
    dtype = Flag("dtype", "the dtype parameter")
    max_num_seqs = Flag("max-num-seqs", "the max_batch_size parameter")
    # Bound to their levers: rendered in this order wherever the value is not the default.
    gpu_memory_utilization = Flag("gpu-memory-utilization", lever="kv_cache_fraction")
    enforce_eager = Flag(
        "enforce-eager", "the compile_mode parameter (none = eager, else compile + CUDA graphs)"
    )
    limit_mm_per_prompt = Flag("limit-mm-per-prompt", "autotune (one image per prompt)")
    tensor_parallel_size = Flag("tensor-parallel-size", _TP, lever="tensor_parallel")
    tp = Flag("tp", _TP)  # an alias of --tensor-parallel-size
    quantization = Flag("quantization", "the weight_quant parameter")
    kv_cache_dtype = Flag("kv-cache-dtype", "the kv_quant parameter")
    enable_prefix_caching = Flag("enable-prefix-caching", _PREFIX_CACHE)
    no_enable_prefix_caching = Flag("no-enable-prefix-caching", _PREFIX_CACHE)
    mm_processor_cache_gb = Flag("mm-processor-cache-gb", f"{_PREFIX_CACHE} (0 when off)")
    enable_lora = Flag("enable-lora", _ADAPTERS)
    lora_modules = Flag("lora-modules", _ADAPTERS)
    max_lora_rank = Flag("max-lora-rank", f"{_ADAPTERS} (the adapters' largest rank)")
    mm_processor_kwargs = Flag(
        "mm-processor-kwargs",
        "the checkpoint's image processor (image_max_side resizes client-side)",
    )
    override_generation_config = Flag(
        "override-generation-config", "the decoding parameters (sent in every request)"
    )
    host = Flag("host", "autotune (--host)")
    port = Flag("port", "autotune (--port)")
    served_model_name = Flag("served-model-name", "autotune (served model name)")
    # Its context length: engine_args may set it, unless the session_len serve option does.
    max_model_len = Flag("max-model-len")


FLAGS = VllmFlags()

BACKEND = Backend(
    name="vllm",
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
    reserved_flags=FLAGS.reserved(),
    defaults_label="vLLM's defaults",
    defaults={"compile_mode": "default", "prefix_cache": True},
    session_len_flag=FLAGS.max_model_len.name,
    unsupported={
        "kv_quant": {
            "int8": "vLLM's --kv-cache-dtype has no int8 (auto or fp8 only)",
            "int4": "vLLM's --kv-cache-dtype has no int4 (auto or fp8 only)",
        }
    },
    cuda_only={"weight_quant": {"fp8": "vLLM's FP8 kernels need a CUDA GPU"}},
)
