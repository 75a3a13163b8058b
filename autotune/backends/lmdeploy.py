"""LMDeploy's `lmdeploy serve api_server` (0.18), with its PyTorch engine.

Checked in its sources, not only its documentation: FP8 weights load from a block-FP8
checkpoint (config.json `quantization_config.quant_method: fp8` with `weight_block_size`, the
layout of Qwen's `-FP8` releases). `--quant-policy` parses none/int4/int8/fp8/fp8_e5m2/
turbo_quant for any model, but the supported-models table marks KV int8 and int4 "No" for
Qwen3-VL and lists no FP8 KV cache for it: autotune does not measure what the engine does not
claim. `--enable-prefix-caching` applies to Qwen3-VL (image hashes are part of the block keys).
"""

from autotune.backends.base import Backend, Flag, FlagTable, InnerEngine

_TABLE = "LMDeploy 0.18's supported-models table"


class LMDeployFlags(FlagTable):
    """`lmdeploy serve api_server`'s flags that autotune renders or reserves."""

    model_path = Flag("model-path", "the model (--model)")
    backend = Flag("backend", "autotune (always the PyTorch engine: TurboMind cannot run Qwen3-VL)")
    dtype = Flag("dtype", "the dtype parameter")
    max_batch_size = Flag("max-batch-size", "the max_batch_size parameter")
    eager_mode = Flag("eager-mode", "the compile_mode parameter (none = eager, else CUDA graphs)")
    quant_policy = Flag("quant-policy", "the kv_quant parameter")
    model_format = Flag(
        "model-format", "the weight_quant parameter (fp8 serves the block-FP8 checkpoint)"
    )
    # Bound to their levers: rendered in this order wherever the value is not the default.
    enable_prefix_caching = Flag("enable-prefix-caching", lever="prefix_cache")
    cache_max_entry_count = Flag("cache-max-entry-count", lever="kv_cache_fraction")
    tp = Flag(
        "tp",
        "the tensor_parallel parameter (GPUs handed out by autotune run --gpus)",
        lever="tensor_parallel",
    )
    adapters = Flag("adapters", "autotune --adapter NAME=PATH")
    server_name = Flag("server-name", "autotune (--host)")
    server_port = Flag("server-port", "autotune (--port)")
    model_name = Flag("model-name", "autotune (served model name)")
    # Its context length: engine_args may set it, unless the session_len serve option does.
    session_len = Flag("session-len")


FLAGS = LMDeployFlags()

BACKEND = Backend(
    name="lmdeploy",
    startup_guess_s=90.0,
    server=True,
    # --cache-max-entry-count: "the percentage of free GPU memory occupied by the k/v cache".
    sizes_cache_from_free_memory=True,
    deploy_command="lmdeploy serve api_server",
    deploys=frozenset({"lmdeploy"}),
    package="lmdeploy",
    module="lmdeploy",
    program="lmdeploy",
    install_hint="pip install 'autotune[lmdeploy]'",
    renderer="autotune.export.lmdeploy:render",
    length_fields=("max_completion_tokens", "min_new_tokens"),
    # It picks TurboMind unless told otherwise and falls back to its PyTorch engine with only a
    # log warning (lmdeploy/archs.py: "Fallback to pytorch engine because ... not supported by
    # turbomind engine", or "... turbomind engine is not installed correctly").
    inner_engine=InnerEngine(
        flag=FLAGS.backend.option,
        default="turbomind",
        fallback_log=r"fall ?back to pytorch engine",
        fallback_to="pytorch",
    ),
    loads_quantized_checkpoints=True,
    reserved_flags=FLAGS.reserved(),
    defaults_label="LMDeploy's defaults",
    defaults={"compile_mode": "default"},
    session_len_flag=FLAGS.session_len.name,
    unsupported={
        "kv_quant": {
            "int8": f"{_TABLE} marks KV int8 'No' for Qwen3-VL",
            "int4": f"{_TABLE} marks KV int4 'No' for Qwen3-VL",
            "fp8": f"{_TABLE} lists no FP8 KV cache for Qwen3-VL",
        }
    },
    cuda_only={"weight_quant": {"fp8": "LMDeploy's FP8 kernels need a CUDA GPU"}},
    adapters_refused="LMDeploy 0.18's PyTorch engine fails to load LoRA adapters of Qwen VL "
    "models (InternLM/lmdeploy#4162, open)",
)
