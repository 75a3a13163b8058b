"""A validated space: its parameters, and turning an Optuna trial into a TrialConfig.

A space file (YAML under `search_spaces/`, or any path) declares the model, the evaluation set,
the deploy target, the objectives, the constraints, the workload, the reference configuration
and each searched parameter with its range or choices and the condition under which it applies.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from autotune.engine_args import EngineArgs
from autotune.errors import did_you_mean
from autotune.params import (
    DEPLOYABLE_BACKENDS,
    MAX_SEED,
    PARAM_NAMES,
    SERVER_BACKENDS,
    DeployTarget,
    TrialConfig,
    no_effect_message,
)
from autotune.space.candidates import NamedCandidates
from autotune.space.settings import (
    MAX_COUNT,
    MAX_TRIAL_TIMEOUT_S,
    Candidate,
    Constraints,
    LaunchSettings,
    Objective,
    ParamSpec,
    SamplerSettings,
    Screening,
    Workload,
    _default_objectives,
    _Strict,
    parse_duration,
)
from autotune.space.support import (
    can_force_length,
    config_problems,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# Space and study names become file names (studies/<name>.db) and database rows: no path
# separators, no leading dot or dash (hidden files, options), nothing that needs quoting.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
NAME_RULE = "1-128 letters, digits, '.', '_' or '-', starting with a letter or a digit"


def check_name(name: str) -> str:
    """`name` when it can name a space or a study; ValueError naming the rule otherwise."""
    # fullmatch: re's `$` would also accept a name that ends with a newline.
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid name: use {NAME_RULE}")
    return name


CPU_THREADS_HELP = (
    "CPU threads of an in-process engine's torch. None: OMP_NUM_THREADS when set, else the "
    "cores this run may use (affinity), shared by the engines it keeps at once, less one for "
    "the study process (autotune.engines.threads). Recorded in each trial's environment."
)

BUDGET_HELP = (
    "Wall-clock budget of the study's trials (start-ups included), e.g. 30m; no trial is "
    "started that cannot finish inside it. At most 30 days (a study resumes for more)."
)
TRIALS_HELP = "Trials to run (the reference included); at most 100,000."
BASELINE_HELP = (
    "Measure the deploy target's engine as its documentation starts it, once, as the baseline "
    "`best` states the recommendation's gain over (autotune.space.engine_defaults)."
)
GPU_PRICE_HELP = (
    "USD per hour of the machine a trial ran on, for the cost per million output tokens in "
    "`best` and the report (their --gpu-price-per-hour wins); None: no price is assumed."
)


class SearchSpace(_Strict):
    """A validated space file."""

    name: str = Field(description="Space name; the default study name.")
    description: str = ""
    model: str = Field(description="Hub id or local path (relative paths: to the space file).")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where engines run.")
    deploy: DeployTarget = Field(
        "swift",
        description="The deploy target: `best`, `export` and `verify` recommend only trials "
        "whose command for it reproduces what was measured (autotune.export.reproduce).",
    )
    budget: float | None = Field(None, description=BUDGET_HELP)
    gpu_price_per_hour: float | None = Field(None, gt=0, le=1e6, description=GPU_PRICE_HELP)
    engine_defaults_baseline: bool = Field(True, description=BASELINE_HELP)
    evalset: str = Field("smoke", description="Bundled evaluation-set name or a path.")
    trials: int = Field(20, ge=1, le=MAX_COUNT, description=TRIALS_HELP)
    trial_timeout_s: float = Field(
        900,
        gt=0,
        le=MAX_TRIAL_TIMEOUT_S,
        description="A trial running longer fails. At most 7 days; above the workload's "
        "max_warmup_s + max_measure_s, which its load test may take.",
    )
    cpu_threads: int | None = Field(None, ge=1, le=4096, description=CPU_THREADS_HELP)
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Sampler seed (numpy takes 32 bits).")
    workload: Workload = Field(default_factory=Workload)
    objectives: list[Objective] = Field(default_factory=_default_objectives, min_length=1)
    constraints: Constraints = Field(default_factory=Constraints)
    screening: Screening = Field(default_factory=Screening)
    sampler: SamplerSettings = Field(default_factory=SamplerSettings)
    launches: LaunchSettings = Field(default_factory=LaunchSettings)
    reference: dict[str, Any] = Field(
        default_factory=dict, description="TrialConfig values of the reference trial."
    )
    candidates: list[Candidate] = Field(
        default_factory=list,
        description="Named configurations measured right after the reference, through "
        "Optuna's enqueue_trial (known recipes to compare the search with).",
    )
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    quantized_checkpoints: dict[Literal["fp8"], str] = Field(
        default_factory=dict,
        description="The model in a quantised layout, by weight_quant value, for engines that "
        "serve a checkpoint (LMDeploy's FP8: Qwen/Qwen3-VL-2B-Instruct-FP8). With "
        "--dummy-weights a random checkpoint in that layout is built instead.",
    )
    engine_args: EngineArgs = Field(
        default_factory=EngineArgs,
        description="Extra server flags per export format (lmdeploy, vllm, swift), passed "
        "through to every command started and exported; not searched.",
    )

    source: Path | None = Field(None, exclude=True, description="File the space came from.")
    # (what they were made from, the candidates): _named_candidates.
    _named: tuple[tuple[int, ...], NamedCandidates] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _check_params(self) -> SearchSpace:
        _check_param_specs(self.params)
        try:
            reference = self.reference_config()
        except ValidationError as exc:
            raise ValueError(f"reference: {_first_error(exc)}") from None
        for problem in config_problems(reference.model_dump(), device=self.device):
            raise ValueError(f"reference: {problem}")
        # Linear in the candidates: an --enqueue file may hold tens of thousands.
        seen: set[str] = set()
        configs = [reference]
        named = self._named_candidates()  # kept: every later lookup would make them again
        for index, candidate in enumerate(self.candidates):
            if candidate.name in seen:
                raise ValueError(f"candidates[{index}]: name '{candidate.name}' is used twice")
            seen.add(candidate.name)
            try:
                config = named.make(candidate)
            except ValidationError as exc:
                raise ValueError(f"candidates[{index}].config: {_first_error(exc)}") from None
            configs.append(config)
            named.configs[candidate.name] = config
            for problem in config_problems(config.model_dump(), device=self.device):
                raise ValueError(f"candidates[{index}].config: {problem}")
            # Never dropped: the trial would carry the candidate's name for another config.
            lacking = no_effect_message(config.backend, list(candidate.config))
            if lacking is not None:
                raise ValueError(f"candidates[{index}] ({candidate.name}): {lacking}")
        # The reference is measured first and need not be a candidate (an in-process baseline
        # beside server candidates); only the values it shares with the search are recorded as
        # its trial parameters.
        _check_equal_work(self, configs)
        _check_load_fits_the_timeout(self)
        return self

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        return check_name(value)

    @field_validator("budget", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    def reference_config(self) -> TrialConfig:
        """The configuration every other trial is compared with."""
        return TrialConfig(**self.reference)

    def find_candidate(self, name: str) -> Candidate | None:
        """The candidate named `name` (None if there is none), found in constant time."""
        return self._named_candidates().by_name.get(name)

    def candidate_config(self, name: str) -> TrialConfig:
        """A named candidate: its values over the reference's (sampling knobs only if set)."""
        return self._named_candidates().config(name)

    def _named_candidates(self) -> NamedCandidates:
        """The candidates by name and their configurations made so far, kept for the
        candidates, reference and params they were made from (a copy with other ones makes
        its own)."""
        key = (id(self.candidates), id(self.reference), id(self.params), len(self.candidates))
        if self._named is None or self._named[0] != key:
            made = NamedCandidates(
                self.candidates, self.reference_config(), self.server_max_batch_size()
            )
            self._named = (key, made)
        return self._named[1]

    def server_max_batch_size(self) -> int:
        """A server's batch cap when max_batch_size is not searched: the largest batch_size the
        space can ask for, so every concurrency it measures fits in one launch."""
        sizes = [self.reference_config().batch_size]
        spec = self.params.get("batch_size")
        if spec is not None and spec.choices is not None:
            sizes += [int(v) for v in spec.choices]
        elif spec is not None and spec.high is not None:
            sizes.append(int(spec.high))
        return max(sizes)

    def deployable_backends(self) -> set[str]:
        """The backends this space can measure that reproduce on its deploy target."""
        spec = self.params.get("backend")
        backends = set(spec.choices or []) if spec is not None else set()
        backends.add(self.reference_config().backend)
        return backends & DEPLOYABLE_BACKENDS[self.deploy]

    def directions(self) -> list[str]:
        return [str(objective.direction) for objective in self.objectives]

    def resolve_path(self, value: str) -> str:
        """A path relative to the space file if it names one that exists; else unchanged."""
        if self.source is not None and not Path(value).is_absolute():
            candidate = (self.source.parent / value).resolve()
            if candidate.exists() or value.startswith("."):
                return str(candidate)
        return value


def _check_param_specs(params: dict[str, ParamSpec]) -> None:
    """Each searched parameter is known, its values are its field's, and its `when` names
    parameters decided before it (Optuna suggests them in PARAM_NAMES' order)."""
    for name, spec in params.items():
        if name not in PARAM_NAMES:
            raise ValueError(
                f"params.{name}: unknown parameter; {did_you_mean(name, PARAM_NAMES)}"
                f"known: {', '.join(PARAM_NAMES)}"
            )
        _check_values(name, spec)
        for other, values in spec.when.items():
            if other not in PARAM_NAMES or PARAM_NAMES.index(other) >= PARAM_NAMES.index(name):
                earlier = ", ".join(PARAM_NAMES[: PARAM_NAMES.index(name)])
                raise ValueError(
                    f"params.{name}.when: '{other}' must be a parameter decided earlier ({earlier})"
                )
            for value in values:
                _validate_value(other, value, f"params.{name}.when.{other}")


def _check_load_fits_the_timeout(space: SearchSpace) -> None:
    """A load test that may run past the trial's timeout would end every trial timed out,
    the reference first, after the whole wait."""
    caps = space.workload.max_warmup_s + space.workload.max_measure_s
    if caps >= space.trial_timeout_s:
        raise ValueError(
            f"workload.max_warmup_s + workload.max_measure_s ({caps:g} s) must be below "
            f"trial_timeout_s ({space.trial_timeout_s:g} s), or the trial is timed out before "
            "its load test can end; lower them or raise trial_timeout_s"
        )


def _check_equal_work(space: SearchSpace, configs: list[TrialConfig]) -> None:
    """Trials are ranked on output tokens/s only when they do the same work (`configs`:
    the reference's and the candidates')."""
    backends = {config.backend for config in configs}
    backend_spec = space.params.get("backend")
    backends |= set(backend_spec.choices or []) if backend_spec is not None else set()
    if space.workload.output_tokens is not None:
        servers = {space.deploy} | (backends & SERVER_BACKENDS)
        cannot = sorted(fmt for fmt in servers if not can_force_length(fmt))
        if cannot:
            raise ValueError(
                f"workload.output_tokens: {cannot[0]} requests cannot force an answer "
                "length (ms-swift takes neither min_tokens nor ignore_eos), so its trials "
                "and verify would not do the work the others did; remove output_tokens"
            )
        return
    ranked = [o.metric for o in space.objectives]
    if "throughput_output_tokens_per_s" not in ranked:
        return
    lengths = {config.max_new_tokens for config in configs}
    spec = space.params.get("max_new_tokens")
    if spec is not None:
        lengths |= set(spec.choices) if spec.choices is not None else {spec.low, spec.high}
    if len(lengths) > 1:
        raise ValueError(
            f"max_new_tokens takes {len(lengths)} values but workload.output_tokens is not "
            "set: trials with longer answers would rank higher on output tokens/s for doing "
            "more work; set workload.output_tokens (every load-test answer that long), or "
            "rank on throughput_requests_per_s"
        )


def _base_type(name: str) -> Any:
    """The field's type without Optional: int, float, bool, or a Literal."""
    annotation = TrialConfig.model_fields[name].annotation
    args = [arg for arg in get_args(annotation) if arg is not type(None)]
    return (
        args[0] if get_origin(annotation) in (Union, UnionType) and len(args) == 1 else annotation
    )


def is_int_param(name: str) -> bool:
    return _base_type(name) is int


def _validate_value(name: str, value: Any, where: str) -> None:
    field = TrialConfig.model_fields[name]
    annotation = (
        Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
    )
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    try:
        adapter.validate_python(value, strict=isinstance(value, bool) or None)
    except ValidationError as exc:
        raise ValueError(
            f"{where}: {value!r} is not allowed for {name}: {_first_error(exc)}"
        ) from None


def _check_values(name: str, spec: ParamSpec) -> None:
    if spec.choices is not None:
        for i, value in enumerate(spec.choices):
            _validate_value(name, value, f"params.{name}.choices[{i}]")
        return
    if not _is_numeric(name):
        raise ValueError(f"params.{name}: takes 'choices', not a numeric range")
    if is_int_param(name):
        _check_int_range(name, spec)
    for bound in ("low", "high"):
        value = getattr(spec, bound)
        _validate_value(name, int(value) if is_int_param(name) else value, f"params.{name}.{bound}")


def _check_int_range(name: str, spec: ParamSpec) -> None:
    """What Optuna's suggest_int would refuse only once the trial asks for the value."""
    assert spec.low is not None
    if spec.step is not None and (spec.step != int(spec.step) or spec.step < 1):
        raise ValueError(f"params.{name}.step: {spec.step} is not a whole number of 1 or more")
    if spec.log and int(spec.low) < 1:
        raise ValueError(f"params.{name}.low: a log range of whole numbers starts at 1 or more")


def _is_numeric(name: str) -> bool:
    return _base_type(name) in (int, float)


def _first_error(exc: ValidationError, *, top_level: bool = False) -> str:
    """The first pydantic error as 'field.path: message', in words a space author knows."""
    error = exc.errors()[0]
    loc = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field"
        if top_level and "." not in loc:
            allowed = ", ".join(name for name in SearchSpace.model_fields if name != "source")
            message = f"unknown field (allowed here: {allowed})"
    elif error["type"] == "missing":
        message = "required field is missing"
    return f"{loc}: {message}" if loc else message
