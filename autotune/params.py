"""The searched parameters: their names, allowed values and what each one affects.

One place defines every knob autotune can turn: LEVER_TABLE, one declaration each, from which
TrialConfig's fields and every list of parameters below are derived. Space files, trial
parameters, exports and reports all use these names, so a value means the same thing
everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    ValidationInfo,
    create_model,
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

LAUNCH: Final = "launch"
REQUEST: Final = "request"


@dataclass(frozen=True)
class Lever:
    """One searched parameter, declared once: every list of parameters below, TrialConfig's
    field, the support checks (autotune.space.support), the reproduction check
    (autotune.export.reproduce) and the steps derive from it. An engine's command takes it
    through a `Flag(..., lever=name)` in that engine's flag table, which every renderer
    passes through (autotune.export.base.lever_flags), so a new lever is its declaration here
    and one flag per engine that has it.
    """

    name: str
    # LAUNCH: fixed while an engine is up (a new launch to change it); REQUEST: a client
    # chooses it per request, on an engine that is already up.
    kind: Literal["launch", "request"]
    annotation: Any
    default: Any
    description: str
    # pydantic bounds: ge, gt, le, lt.
    bounds: Mapping[str, float] = field(default_factory=dict)
    # It cannot change a greedy answer (TrialConfig.output_key leaves it out).
    output_neutral: bool = False
    # It applies only when do_sample is on.
    sampling: bool = False
    # It moves throughput several-fold (LEVERS): the covering start-up draws every level.
    major: bool = False
    # A value other than its default is checked against what the engine serves for
    # Qwen3-VL wherever a configuration is given whole (autotune.space.support).
    checked: bool = False
    # The engines that have no use for it -> why: never proposed for them.
    lacked_by: Mapping[str, str] = field(default_factory=dict)
    # What a value other than its default did in-process that another engine's command does
    # not do again ({value} is the value): such a trial reproduces on no other deploy target.
    what_if: str | None = None

    def pydantic_field(self) -> Any:
        """TrialConfig's field for it."""
        return (self.annotation, Field(self.default, description=self.description, **self.bounds))


# TrialConfig's fields, in the order a stored configuration lists them.
LEVER_TABLE: tuple[Lever, ...] = (
    Lever("backend", LAUNCH, Backend, "transformers", "Serving engine."),
    Lever("dtype", LAUNCH, Dtype, "auto", "Weight and activation dtype; auto = checkpoint's."),
    Lever(
        "weight_quant",
        LAUNCH,
        WeightQuant,
        "none",
        "Weights: none (the dtype) or fp8: LMDeploy serves the block-FP8 "
        "checkpoint (quantized_checkpoints.fp8), vLLM --quantization fp8, transformers "
        "FineGrainedFP8Config in-process (a what-if).",
        checked=True,
        lacked_by={"swift": "no swift deploy flag quantises on load"},
        what_if="{value} weights quantised in-process (FineGrainedFP8Config)",
    ),
    Lever(
        "kv_quant",
        LAUNCH,
        KvQuant,
        "none",
        "KV-cache quantisation: LMDeploy --quant-policy, vLLM --kv-cache-dtype "
        "(autotune.space.support lists what each engine allows for Qwen3-VL).",
        checked=True,
        lacked_by={"swift": "no swift deploy flag quantises the KV cache"},
    ),
    Lever(
        "attn_implementation",
        LAUNCH,
        AttnImplementation,
        "sdpa",
        "Attention kernels.",
        lacked_by={
            "lmdeploy": "its PyTorch engine runs its own attention kernels",
            "vllm": "vLLM picks its own attention backend",
        },
    ),
    Lever(
        "compile_mode",
        LAUNCH,
        CompileMode,
        "none",
        "transformers: none, or static KV cache + torch.compile with this mode; "
        "lmdeploy/vllm: none = eager, any other value = the engine's CUDA graphs.",
        major=True,
        lacked_by={"swift": "no swift deploy flag applies torch.compile"},
        what_if="static cache + torch.compile ({value})",
    ),
    Lever(
        "image_max_side",
        REQUEST,
        int | None,
        None,
        "Longest image side in pixels; None keeps full size.",
        bounds={"ge": 32, "le": 16384},
        major=True,
    ),
    Lever(
        "kv_cache_fraction",
        LAUNCH,
        float | None,
        None,
        "Share of free GPU memory for the KV cache.",
        bounds={"gt": 0.0, "lt": 1.0},
        output_neutral=True,
        major=True,
        lacked_by={
            "transformers": "in-process, no server sizes a KV cache",
            "swift": "no swift deploy flag sizes its transformers engine's KV cache",
        },
    ),
    Lever(
        "max_batch_size",
        LAUNCH,
        int | None,
        None,
        "Servers: most requests the engine batches at once (launch-time); "
        "None in-process, where batch_size is the batch.",
        bounds={"ge": 1, "le": 4096},
        output_neutral=True,
        lacked_by={"transformers": "in-process, batch_size is the batch"},
    ),
    Lever(
        "tensor_parallel",
        LAUNCH,
        int,
        1,
        "GPUs one engine spreads the model over (LMDeploy --tp, vLLM "
        "--tensor-parallel-size); 1 everywhere else.",
        bounds={"ge": 1, "le": 64},
        lacked_by={
            "transformers": "in-process, the model sits on one GPU",
            "swift": "no swift deploy flag splits its transformers engine's model",
        },
    ),
    Lever(
        "prefix_cache",
        LAUNCH,
        StrictBool,
        False,
        "Reuse work for repeated prompts and images: LMDeploy "
        "--enable-prefix-caching, vLLM prefix caching and its multimodal processor cache; "
        "in-process, a content-hash cache of vision embeddings (a what-if).",
        checked=True,
        lacked_by={"swift": "ms-swift's transformers engine has no such cache"},
        what_if="vision embeddings of repeated images reused in-process",
    ),
    Lever(
        "batch_size",
        REQUEST,
        int,
        1,
        "In-process: the static batch; servers: requests in flight.",
        bounds={"ge": 1, "le": 1024},
        output_neutral=True,
        major=True,
    ),
    # Strict: "true", "yes" or 1 in a space file are typos, not booleans.
    Lever(
        "do_sample",
        REQUEST,
        StrictBool,
        False,
        "Sample instead of greedy decoding.",
        what_if="sampled in-process: ms-swift's sampler draws other random numbers",
    ),
    Lever(
        "temperature",
        REQUEST,
        float | None,
        None,
        "Sampling temperature.",
        bounds={"gt": 0.0, "le": 2.0},
        sampling=True,
    ),
    Lever(
        "top_k",
        REQUEST,
        int | None,
        None,
        "Top-k sampling cut-off.",
        bounds={"ge": 1, "le": 1000},
        sampling=True,
    ),
    Lever(
        "top_p",
        REQUEST,
        float | None,
        None,
        "Nucleus sampling mass.",
        bounds={"gt": 0.0, "le": 1.0},
        sampling=True,
    ),
    Lever(
        "repetition_penalty",
        REQUEST,
        float,
        1.0,
        "Repetition penalty.",
        bounds={"ge": 0.5, "le": 2.0},
    ),
    Lever(
        "max_new_tokens",
        REQUEST,
        int,
        64,
        "Cap on generated tokens.",
        bounds={"ge": 1, "le": 32768},
    ),
)
LEVER_BY_NAME: dict[str, Lever] = {lever.name: lever for lever in LEVER_TABLE}

# What an engine is started with: changing one of these needs a new launch (a new server
# process, or a new model load in the worker). Everything else is chosen per request, so
# several trials can share one launch (autotune.study.run.launches).
LAUNCH_PARAMS: tuple[str, ...] = tuple(lever.name for lever in LEVER_TABLE if lever.kind == LAUNCH)
_REQUEST_ORDER = tuple(lever.name for lever in LEVER_TABLE if lever.kind == REQUEST)
# Launch-time first, then request-time.
PARAM_NAMES: tuple[str, ...] = (*LAUNCH_PARAMS, *_REQUEST_ORDER)

# Parameters a client controls per request (batch_size as the number of requests in flight):
# the only ones that change between trials on one launch, and the only ones searched when
# measuring a server someone else started (--endpoint).
REQUEST_PARAMS: frozenset[str] = frozenset(_REQUEST_ORDER)

# Parameters that cannot change a greedy answer: the same prompt gives the same tokens whatever
# the batch size or the share of memory given to the KV cache. Accuracy measured once is reused
# across trials that differ only in these (tests/accuracy/test_output_neutral.py checks the
# claim on the bundled model).
OUTPUT_NEUTRAL_PARAMS: frozenset[str] = frozenset(
    lever.name for lever in LEVER_TABLE if lever.output_neutral
)
OUTPUT_AFFECTING_PARAMS: tuple[str, ...] = tuple(
    name for name in PARAM_NAMES if name not in OUTPUT_NEUTRAL_PARAMS
)

SAMPLING_PARAMS: frozenset[str] = frozenset(lever.name for lever in LEVER_TABLE if lever.sampling)

# The levers: the searched parameters that move throughput several-fold (bench/results/h200-*),
# the request-time ones a running launch takes, then the launch-time ones. The study's first
# proposals work through them: the covering start-up draws every level of each
# (autotune.study.proposals.sampler), and the one-lever steps change the request-time ones on the
# incumbent's launch before any launch parameter (autotune.study.proposals.steering).
REQUEST_LEVERS: tuple[str, ...] = tuple(
    name for name in _REQUEST_ORDER if LEVER_BY_NAME[name].major
)
LEVERS: tuple[str, ...] = (
    *REQUEST_LEVERS,
    *(name for name in LAUNCH_PARAMS if LEVER_BY_NAME[name].major),
)


def lacks(backend: str) -> frozenset[str]:
    """The parameters `backend` has no use for: those the table says it lacks, and those its
    own Backend lists (a plugin engine's)."""
    engine = BACKENDS.get(backend)
    declared = frozenset(lever.name for lever in LEVER_TABLE if backend in lever.lacked_by)
    return declared | (engine.lacks if engine is not None else frozenset())


# Which backend can honour which parameter. A parameter a backend lacks is never suggested for
# it, so a trial never records a knob that had no effect. For LMDeploy and vLLM, compile_mode
# none means eager execution (--eager-mode / --enforce-eager) and any other value the engine's
# own CUDA graphs (and, for vLLM, its torch.compile): the engines have no per-mode choice.
# Quantisation and caches: which values each engine supports for Qwen3-VL is in
# autotune.space.support.
BACKEND_PARAMS: dict[str, frozenset[str]] = {
    name: frozenset(PARAM_NAMES) - lacks(name) for name in BACKENDS
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


class _TrialConfigRules(BaseModel):
    """TrialConfig's rules; its fields come from LEVER_TABLE (see TrialConfig below)."""

    # NaN passes every bound (all comparisons with it are false); infinities are no setting.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_number(cls, value: Any, info: ValidationInfo) -> Any:
        return refuse_bool_for_number(value, info, cls)

    @model_validator(mode="after")
    def _sampling_only_when_sampling(self) -> _TrialConfigRules:
        if not self.do_sample:
            set_sampling = [name for name in SAMPLING_PARAMS if getattr(self, name) is not None]
            if set_sampling:
                raise ValueError(
                    f"{', '.join(sorted(set_sampling))} only apply when do_sample is true"
                )
        return self

    @model_validator(mode="after")
    def _defaults_set_no_launch_value(self) -> _TrialConfigRules:
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


# One complete serving configuration: what a trial measures and what export renders. Its
# fields are the table's levers in their order, then the seed and engine_defaults, which are
# no searched parameter.
TrialConfig = create_model(
    "TrialConfig",
    __base__=_TrialConfigRules,
    __module__=__name__,
    __doc__="One complete serving configuration: what a trial measures and what export renders.",
    **{lever.name: lever.pydantic_field() for lever in LEVER_TABLE},
    seed=(
        int,
        Field(0, ge=0, le=MAX_SEED, description="Sampling seed (fixed so sampled runs repeat)."),
    ),
    engine_defaults=(
        StrictBool,
        Field(
            False,
            description="Launch the engine as its documentation starts it: no launch flag of "
            "autotune's (batch cap, KV share, eager mode, dtype, session length...); the launch "
            "values above then only record what those defaults are. A study's baseline.",
        ),
    ),
)

# An Optuna parameter name is the parameter's own, or `name@backend` where a backend supports
# fewer of the space's choices than the others (autotune.space.sampling.searched):
# Optuna needs one distribution per name, and an unsupported value must never be proposed.
BACKEND_QUALIFIER = "@"


def base_param(key: str) -> str:
    """The parameter an Optuna parameter name stands for (`kv_quant@vllm` -> `kv_quant`)."""
    return key.split(BACKEND_QUALIFIER, 1)[0]
