"""The searched parameters: their names, allowed values and what each one affects.

One place defines every knob autotune can turn. Space files, trial parameters, exports and
reports all use these names, so a value means the same thing everywhere.
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from autotune.backends import BACKENDS, deploy_targets, server_backends

# The engines of the registry (autotune.backends), in its order: a new engine module and its
# registry line are all a TrialConfig needs to accept it.
Backend = Literal[tuple(BACKENDS)]  # type: ignore[valid-type]
DeployTarget = Literal[deploy_targets()]  # type: ignore[valid-type]
Dtype = Literal["auto", "float32", "float16", "bfloat16"]
AttnImplementation = Literal["eager", "sdpa", "flash_attention_2"]
CompileMode = Literal["none", "default", "reduce-overhead", "max-autotune"]
WeightQuant = Literal["none", "fp8"]
KvQuant = Literal["none", "int8", "int4", "fp8"]

PARAM_NAMES: tuple[str, ...] = (
    # Launch-time: fixed while an engine is up (LAUNCH_PARAMS).
    "backend",
    "dtype",
    "weight_quant",
    "kv_quant",
    "attn_implementation",
    "compile_mode",
    "kv_cache_fraction",
    "max_batch_size",
    "tensor_parallel",
    "prefix_cache",
    # Request-time: a client chooses them per request, on an engine that is already up.
    "image_max_side",
    "batch_size",
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "max_new_tokens",
)

# Parameters that cannot change a greedy answer: the same prompt gives the same tokens whatever
# the batch size or the share of memory given to the KV cache. Accuracy measured once is reused
# across trials that differ only in these (tests/accuracy/test_output_neutral.py checks the
# claim on the bundled model).
OUTPUT_NEUTRAL_PARAMS: frozenset[str] = frozenset(
    {"batch_size", "kv_cache_fraction", "max_batch_size"}
)
OUTPUT_AFFECTING_PARAMS: tuple[str, ...] = tuple(
    name for name in PARAM_NAMES if name not in OUTPUT_NEUTRAL_PARAMS
)

SAMPLING_PARAMS: frozenset[str] = frozenset({"temperature", "top_k", "top_p"})

# Which backend can honour which parameter (each engine's `lacks`, autotune.backends). A
# parameter a backend lacks is never suggested for it, so a trial never records a knob that had
# no effect. For LMDeploy and vLLM, compile_mode none means eager execution (--eager-mode /
# --enforce-eager) and any other value the engine's own CUDA graphs (and, for vLLM, its
# torch.compile): the engines have no per-mode choice. max_batch_size is a server's cap on
# requests it batches; in-process, batch_size is the batch. tensor_parallel splits one model
# over several GPUs: LMDeploy --tp, vLLM --tensor-parallel-size. Quantisation and caches: which
# values each engine supports for Qwen3-VL is in autotune.space.support.
BACKEND_PARAMS: dict[str, frozenset[str]] = {
    name: frozenset(PARAM_NAMES) - backend.lacks for name, backend in BACKENDS.items()
}


def no_effect_message(backend: str, names: list[str] | tuple[str, ...] | Any) -> str | None:
    """Why setting `names` for `backend` is refused: the first one it has no use for (it would
    be dropped, and the trial would not be what was asked), with the backends that have it."""
    for name in names:
        if name in PARAM_NAMES and name not in BACKEND_PARAMS.get(backend, frozenset()):
            others = [b for b, params in BACKEND_PARAMS.items() if name in params]
            return (
                f"the {backend} backend has no {name} (it would have no effect); backends that "
                f"have it: {', '.join(others)}"
            )
    return None


# Backends that autotune measures through a server process rather than in-process.
SERVER_BACKENDS: frozenset[str] = server_backends()

# Where a recommendation can be deployed, and which backends' trials each target reproduces:
# its own server, and for ms-swift also the in-process transformers engine it wraps (under the
# conditions autotune.export.reproduce checks: no compile, greedy).
DEPLOY_TARGETS: tuple[str, ...] = deploy_targets()
DEPLOYABLE_BACKENDS: dict[str, frozenset[str]] = {
    name: BACKENDS[name].deploys for name in DEPLOY_TARGETS
}


def clear_unused_launch_params(values: dict[str, Any]) -> None:
    """A backend's KV-cache share and tensor parallelism, where it has none, at their neutral
    values (None, 1), so two configurations that differ only there are one."""
    # An unknown backend is TrialConfig's to refuse, in its own words.
    params = BACKEND_PARAMS.get(values["backend"], frozenset())
    if "kv_cache_fraction" not in params:
        values["kv_cache_fraction"] = None
    if "tensor_parallel" not in params:
        values["tensor_parallel"] = 1


# What an engine is started with: changing one of these needs a new launch (a new server
# process, or a new model load in the worker). Everything else is chosen per request, so
# several trials can share one launch (autotune.study.run.launches).
LAUNCH_PARAMS: tuple[str, ...] = PARAM_NAMES[: PARAM_NAMES.index("image_max_side")]

# Parameters a client controls per request (batch_size as the number of requests in flight):
# the only ones that change between trials on one launch, and the only ones searched when
# measuring a server someone else started (--endpoint).
REQUEST_PARAMS: frozenset[str] = frozenset(PARAM_NAMES) - frozenset(LAUNCH_PARAMS)

# The levers: the searched parameters that move throughput several-fold (bench/results/h200-*),
# the request-time ones a running launch takes, then the launch-time ones. The study's first
# proposals work through them: the covering start-up draws every level of each
# (autotune.study.proposals.coverage), and the one-lever steps change the request-time ones on the
# incumbent's launch before any launch parameter (autotune.study.proposals.steps).
REQUEST_LEVERS: tuple[str, ...] = ("image_max_side", "batch_size")
LEVERS: tuple[str, ...] = (*REQUEST_LEVERS, "kv_cache_fraction", "compile_mode")

# Seeds reach numpy's and torch's generators, which take 32-bit unsigned seeds only.
MAX_SEED = 2**32 - 1


def refuse_bool_for_number(value: Any, info: ValidationInfo, model: type[BaseModel]) -> Any:
    """A boolean where a number is expected is a mistake (`batch_size: yes`), not 1 or 0.

    pydantic's lax mode would turn true into 1; a number field that takes no boolean refuses it.
    """
    if isinstance(value, bool) and info.field_name is not None:
        kinds = _kinds(model.model_fields[info.field_name].annotation)
        if bool not in kinds and kinds & {int, float}:
            raise ValueError(f"{str(value).lower()} is a boolean, not a number")
    return value


def _kinds(annotation: Any) -> set[Any]:
    """The plain types an annotation is made of (through Optional and unions)."""
    args = get_args(annotation)
    if not args or get_origin(annotation) is Literal:
        return {annotation}
    return set().union(*(_kinds(arg) for arg in args))


class TrialConfig(BaseModel):
    """One complete serving configuration: what a trial measures and what export renders."""

    # NaN passes every bound (all comparisons with it are false); infinities are no setting.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    backend: Backend = Field("transformers", description="Serving engine.")
    dtype: Dtype = Field("auto", description="Weight and activation dtype; auto = checkpoint's.")
    weight_quant: WeightQuant = Field(
        "none",
        description="Weights: none (the dtype) or fp8: LMDeploy serves the block-FP8 "
        "checkpoint (quantized_checkpoints.fp8), vLLM --quantization fp8, transformers "
        "FineGrainedFP8Config in-process (a what-if).",
    )
    kv_quant: KvQuant = Field(
        "none",
        description="KV-cache quantisation: LMDeploy --quant-policy, vLLM --kv-cache-dtype "
        "(autotune.space.support lists what each engine allows for Qwen3-VL).",
    )
    attn_implementation: AttnImplementation = Field("sdpa", description="Attention kernels.")
    compile_mode: CompileMode = Field(
        "none",
        description="transformers: none, or static KV cache + torch.compile with this mode; "
        "lmdeploy/vllm: none = eager, any other value = the engine's CUDA graphs.",
    )
    image_max_side: int | None = Field(
        None, ge=32, le=16384, description="Longest image side in pixels; None keeps full size."
    )
    kv_cache_fraction: float | None = Field(
        None, gt=0.0, lt=1.0, description="Share of free GPU memory for the KV cache."
    )
    max_batch_size: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Servers: most requests the engine batches at once (launch-time); "
        "None in-process, where batch_size is the batch.",
    )
    tensor_parallel: int = Field(
        1,
        ge=1,
        le=64,
        description="GPUs one engine spreads the model over (LMDeploy --tp, vLLM "
        "--tensor-parallel-size); 1 everywhere else.",
    )
    prefix_cache: StrictBool = Field(
        False,
        description="Reuse work for repeated prompts and images: LMDeploy "
        "--enable-prefix-caching, vLLM prefix caching and its multimodal processor cache; "
        "in-process, a content-hash cache of vision embeddings (a what-if).",
    )
    batch_size: int = Field(
        1, ge=1, le=1024, description="In-process: the static batch; servers: requests in flight."
    )
    # Strict: "true", "yes" or 1 in a space file are typos, not booleans.
    do_sample: StrictBool = Field(False, description="Sample instead of greedy decoding.")
    temperature: float | None = Field(None, gt=0.0, le=2.0, description="Sampling temperature.")
    top_k: int | None = Field(None, ge=1, le=1000, description="Top-k sampling cut-off.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    repetition_penalty: float = Field(1.0, ge=0.5, le=2.0, description="Repetition penalty.")
    max_new_tokens: int = Field(64, ge=1, le=32768, description="Cap on generated tokens.")
    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="Sampling seed (fixed so sampled runs repeat)."
    )
    engine_defaults: StrictBool = Field(
        False,
        description="Launch the engine as its documentation starts it: no launch flag of "
        "autotune's (batch cap, KV share, eager mode, dtype, session length...); the launch "
        "values above then only record what those defaults are. A study's baseline.",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_number(cls, value: Any, info: ValidationInfo) -> Any:
        return refuse_bool_for_number(value, info, cls)

    @model_validator(mode="after")
    def _sampling_only_when_sampling(self) -> TrialConfig:
        if not self.do_sample:
            set_sampling = [name for name in SAMPLING_PARAMS if getattr(self, name) is not None]
            if set_sampling:
                raise ValueError(
                    f"{', '.join(sorted(set_sampling))} only apply when do_sample is true"
                )
        return self

    @model_validator(mode="after")
    def _defaults_set_no_launch_value(self) -> TrialConfig:
        # The engine's defaults size its batch and cache itself: a value here would be recorded
        # as measured and never passed.
        if not self.engine_defaults:
            return self
        if self.backend not in SERVER_BACKENDS:
            raise ValueError("engine_defaults starts a server: the backend must be one")
        if self.max_batch_size is not None or self.kv_cache_fraction is not None:
            raise ValueError("engine_defaults leaves max_batch_size and kv_cache_fraction unset")
        return self

    @model_serializer(mode="wrap")
    def _without_engine_defaults_off(self, handler: SerializerFunctionWrapHandler) -> Any:
        """engine_defaults only where it is on: the configurations stored before it existed,
        the answers cache's keys and every export of a tuned trial stay as they were."""
        data = handler(self)
        if isinstance(data, dict) and not self.engine_defaults:
            data.pop("engine_defaults", None)
        return data

    def launch_key(self) -> tuple[Any, ...]:
        """The launch-time values: trials with equal keys can share one running engine (an
        engine started with its own defaults is another launch than one with equal values)."""
        key = tuple(getattr(self, name) for name in LAUNCH_PARAMS)
        return (*key, True) if self.engine_defaults else key

    def output_key(self) -> dict[str, Any]:
        """The parameters that decide the answers, for reusing accuracy across trials.

        Sampled answers also depend on how the random stream is shared out over a batch, so
        batch_size joins the key when do_sample is on. An engine started with its defaults
        preprocesses and computes as it likes (its checkpoint dtype, its image bounds), so
        its answers are its own.
        """
        names = [*OUTPUT_AFFECTING_PARAMS, "seed"]
        if self.do_sample:
            names.append("batch_size")
        if self.engine_defaults:
            names.append("engine_defaults")
        return {name: getattr(self, name) for name in names}


# An Optuna parameter name is the parameter's own, or `name@backend` where a backend supports
# fewer of the space's choices than the others (autotune.space.sampling.searched):
# Optuna needs one distribution per name, and an unsupported value must never be proposed.
BACKEND_QUALIFIER = "@"


def base_param(key: str) -> str:
    """The parameter an Optuna parameter name stands for (`kv_quant@vllm` -> `kv_quant`)."""
    return key.split(BACKEND_QUALIFIER, 1)[0]
