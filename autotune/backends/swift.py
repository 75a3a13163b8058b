"""ms-swift's `swift deploy` (4.6), serving its transformers engine."""

from autotune.backends.base import Backend, Flag, FlagTable, InnerEngine

_ADAPTERS = "autotune --adapter NAME=PATH"
_DECODING = "the decoding parameters"


class SwiftFlags(FlagTable):
    """`swift deploy`'s flags that autotune renders or reserves: fields of ms-swift's
    DeployArguments, spelled with underscores."""

    model = Flag("model", "the model (--model)")
    model_type = Flag("model_type", "autotune (qwen3_vl)")
    template = Flag("template", "autotune (qwen3_vl)")
    infer_backend = Flag("infer_backend", "the backend parameter")
    torch_dtype = Flag("torch_dtype", "the dtype parameter")
    attn_impl = Flag("attn_impl", "the attn_implementation parameter")
    max_batch_size = Flag("max_batch_size", "the max_batch_size parameter")
    vllm_max_num_seqs = Flag("vllm_max_num_seqs", "the max_batch_size parameter")
    vllm_gpu_memory_utilization = Flag(
        "vllm_gpu_memory_utilization", "the kv_cache_fraction parameter"
    )
    vllm_enforce_eager = Flag("vllm_enforce_eager", "the compile_mode parameter")
    vllm_limit_mm_per_prompt = Flag("vllm_limit_mm_per_prompt", "autotune (one image per prompt)")
    max_new_tokens = Flag("max_new_tokens", "the max_new_tokens parameter")
    temperature = Flag("temperature", _DECODING)
    top_k = Flag("top_k", _DECODING)
    top_p = Flag("top_p", _DECODING)
    seed = Flag("seed", _DECODING)
    repetition_penalty = Flag("repetition_penalty", "the repetition_penalty parameter")
    # Adapters the trials did not measure would be served and exported all the same.
    adapters = Flag("adapters", _ADAPTERS)
    vllm_enable_lora = Flag("vllm_enable_lora", _ADAPTERS)
    vllm_max_lora_rank = Flag("vllm_max_lora_rank", f"{_ADAPTERS} (the adapters' largest rank)")
    host = Flag("host", "autotune (--host)")
    port = Flag("port", "autotune (--port)")
    served_model_name = Flag("served_model_name", "autotune (served model name)")
    # Its vLLM engine's context length: engine_args may set it, unless the session_len serve
    # option does.
    vllm_max_model_len = Flag("vllm_max_model_len")


FLAGS = SwiftFlags()

BACKEND = Backend(
    name="swift",
    startup_guess_s=30.0,
    server=True,
    deploy_command="swift deploy",
    # A trial of the in-process transformers engine reproduces under `swift deploy` (under
    # the conditions autotune.export.reproduce checks: no compile, greedy).
    deploys=frozenset({"swift", "transformers"}),
    package="ms-swift",
    module="swift",
    program="swift",
    install_hint="pip install 'autotune[swift]'",
    renderer="autotune.export.swift:render",
    # No length_fields: ms-swift 4.6's RequestConfig has neither a minimum of tokens nor
    # ignore_eos.
    # Its dataclass argument parser: `--max_batch_size`, and booleans as `--stream false`.
    flag_separator="_",
    boolean_values=True,
    # `pt` is the deprecated name of its transformers engine.
    inner_engine=InnerEngine(
        flag=FLAGS.infer_backend.option, default="transformers", aliases={"pt": "transformers"}
    ),
    reserved_flags=FLAGS.reserved(),
    defaults_label="swift deploy's defaults",
    session_len_flag=FLAGS.vllm_max_model_len.name,
)
