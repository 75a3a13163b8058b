"""Search-space files: loading, validation, and turning an Optuna trial into a TrialConfig.

A space file (YAML under `search_spaces/`, or any path) declares the model, the evaluation set,
the objectives, the constraints, the reference configuration and each searched parameter with
its range or choices and the condition under which it applies.
"""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from autotune.engine_args import EngineArgs
from autotune.errors import SpaceError, did_you_mean
from autotune.measure.registry import METRICS, Direction
from autotune.params import (
    BACKEND_PARAMS,
    PARAM_NAMES,
    REQUEST_PARAMS,
    SAMPLING_PARAMS,
    TrialConfig,
)

if TYPE_CHECKING:
    import optuna

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILTIN_SPACES_DIR = REPO_ROOT / "search_spaces"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ParamSpec(_Strict):
    """How one parameter is searched: a list of choices or a numeric range."""

    choices: list[Any] | None = Field(None, description="Values to choose from.")
    low: float | None = Field(None, description="Lower bound of a numeric range.")
    high: float | None = Field(None, description="Upper bound of a numeric range.")
    step: float | None = Field(None, gt=0, description="Grid step of a numeric range.")
    log: bool = Field(False, description="Sample the range on a log scale.")
    when: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Applies only when each named parameter takes one of the listed values.",
    )

    @model_validator(mode="after")
    def _choices_or_range(self) -> ParamSpec:
        has_range = self.low is not None or self.high is not None
        if (self.choices is None) == (not has_range):
            raise ValueError("give either 'choices' or both 'low' and 'high'")
        if has_range and (self.low is None or self.high is None):
            raise ValueError("a range needs both 'low' and 'high'")
        if has_range and self.low > self.high:  # type: ignore[operator]
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        if self.choices is not None and not self.choices:
            raise ValueError("'choices' is empty")
        return self


class AccuracyConstraint(_Strict):
    """The accuracy floor: absolute, or relative to the reference trial."""

    mode: Literal["relative", "absolute"] = Field("relative", description="Kind of floor.")
    max_drop: float = Field(
        0.05, ge=0.0, le=1.0, description="relative: allowed drop below the reference (0-1)."
    )
    min: float = Field(0.0, ge=0.0, le=1.0, description="absolute: lowest allowed accuracy.")
    test: Literal["bootstrap", "point"] = Field(
        "bootstrap",
        description="relative: 'bootstrap' needs the lower bound of the paired difference's "
        "confidence interval above -max_drop (non-inferiority); 'point' compares means only.",
    )
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="Interval confidence level.")
    enabled: bool = Field(True, description="Switch the floor off (for ablations only).")


class Screening(_Strict):
    """Answer a fixed subset first; prune a trial already worse than the floor with confidence."""

    items: int = Field(0, ge=0, description="Subset size; 0 switches screening off.")
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="Confidence to prune.")


class Constraints(_Strict):
    accuracy: AccuracyConstraint = Field(default_factory=AccuracyConstraint)
    memory_budget_mib: float | None = Field(None, gt=0, description="Peak memory budget.")
    latency_slo_ms: float | None = Field(None, gt=0, description="p95 end-to-end latency SLO.")


class Objective(_Strict):
    metric: str = Field(description="A metric name from autotune.measure.registry.")
    direction: Direction | None = Field(None, description="Defaults to the metric's own.")

    @model_validator(mode="after")
    def _known_metric(self) -> Objective:
        if self.metric not in METRICS:
            raise ValueError(
                f"unknown metric '{self.metric}': {did_you_mean(self.metric, METRICS)}"
                f"known: {', '.join(METRICS)}"
            )
        if self.direction is None:
            self.direction = METRICS[self.metric].direction
        return self


class Workload(_Strict):
    """The measured load: how many requests, after how many warm-up requests."""

    warmup_requests: int = Field(2, ge=1, description="Requests run first and not measured.")
    requests: int = Field(32, ge=4, description="Measured requests for the latency figures.")
    request_rate_per_s: float | None = Field(
        None,
        gt=0,
        description="Server backends: open-loop Poisson arrivals at this rate; None = closed "
        "loop with batch_size requests in flight.",
    )
    startup_timeout_s: float = Field(
        600, gt=0, description="Server backends: time allowed until /v1/models answers."
    )

    def measured_requests(self, batch_size: int) -> int:
        """Requests to measure: at least two full batches, so a batch of 64 is really tested
        with 64 requests in flight and not with the few a small workload would send."""
        return max(self.requests, 2 * batch_size)


class SamplerSettings(_Strict):
    """Optuna's TPE sampler: how many seeded random trials come before it models the results."""

    n_startup_trials: int | None = Field(
        None, ge=1, description="Random trials first; default: a third of the trials (2-10)."
    )


def _default_objectives() -> list[Objective]:
    return [
        Objective(metric="throughput_output_tokens_per_s"),
        Objective(metric="e2e_latency_p95_ms"),
    ]


class SearchSpace(_Strict):
    """A validated space file."""

    name: str = Field(description="Space name; the default study name.")
    description: str = ""
    model: str = Field(description="Hub id or local path (relative paths: to the space file).")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Where engines run.")
    evalset: str = Field("smoke", description="Bundled evaluation-set name or a path.")
    trials: int = Field(20, ge=1, description="Trials to run (the reference included).")
    trial_timeout_s: float = Field(900, gt=0, description="A trial running longer fails.")
    seed: int = Field(0, ge=0, description="Sampler seed.")
    workload: Workload = Field(default_factory=Workload)
    objectives: list[Objective] = Field(default_factory=_default_objectives, min_length=1)
    constraints: Constraints = Field(default_factory=Constraints)
    screening: Screening = Field(default_factory=Screening)
    sampler: SamplerSettings = Field(default_factory=SamplerSettings)
    reference: dict[str, Any] = Field(
        default_factory=dict, description="TrialConfig values of the reference trial."
    )
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    engine_args: EngineArgs = Field(
        default_factory=EngineArgs,
        description="Extra server flags per export format (lmdeploy, vllm, swift), passed "
        "through to every command started and exported; not searched.",
    )

    source: Path | None = Field(None, exclude=True, description="File the space came from.")

    @model_validator(mode="after")
    def _check_params(self) -> SearchSpace:
        for name, spec in self.params.items():
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
                        f"params.{name}.when: '{other}' must be a parameter decided earlier "
                        f"({earlier})"
                    )
                for value in values:
                    _validate_value(other, value, f"params.{name}.when.{other}")
        try:
            reference = self.reference_config().model_dump()
        except ValidationError as exc:
            raise ValueError(f"reference: {_first_error(exc)}") from None
        # The reference is enqueued as an ordinary trial, so its values must be searchable.
        for name in PARAM_NAMES:
            if self.applies(name, reference) and not _contains(self.params[name], reference[name]):
                raise ValueError(
                    f"reference.{name}: {reference[name]!r} lies outside params.{name}; add it "
                    f"to the choices or range (the reference trial must be part of the search)"
                )
        return self

    def reference_config(self) -> TrialConfig:
        """The configuration every other trial is compared with."""
        return TrialConfig(**self.reference)

    def applies(self, name: str, decided: dict[str, Any]) -> bool:
        """Whether parameter `name` is searched, given the values decided so far."""
        backend = decided.get("backend", self.reference_config().backend)
        if name not in BACKEND_PARAMS[backend]:
            return False
        if name in SAMPLING_PARAMS and not decided.get("do_sample", False):
            return False
        spec = self.params.get(name)
        if spec is None:
            return False
        return all(decided.get(other) in values for other, values in spec.when.items())

    def suggest(self, trial: optuna.trial.BaseTrial) -> TrialConfig:
        """Ask the trial for each applicable parameter and build the configuration."""
        values = self.reference_config().model_dump()
        for name in SAMPLING_PARAMS:
            values[name] = None  # a reference that samples must not leak into greedy trials
        for name in PARAM_NAMES:
            if not self.applies(name, values):
                continue
            values[name] = _suggest_one(trial, name, self.params[name])
        if not values["do_sample"]:
            for name in SAMPLING_PARAMS:
                values[name] = None
        if values["backend"] not in ("lmdeploy", "vllm"):
            values["kv_cache_fraction"] = None
        return TrialConfig(**values)

    def reference_params(self) -> dict[str, Any]:
        """The reference as Optuna trial params, for `study.enqueue_trial`."""
        ref = self.reference_config().model_dump()
        params: dict[str, Any] = {}
        for name in PARAM_NAMES:
            if self.applies(name, ref):
                params[name] = ref[name]
        return params

    def for_endpoint(self) -> SearchSpace:
        """This space for a server that is already running: request-side parameters only.

        Server-side parameters stay at their reference values (they describe nothing about the
        endpoint); start-up time and memory cannot be seen from a client, so they can be
        neither an objective nor a constraint.
        """
        unmeasurable = {"startup_s", "peak_memory_mib"}
        bad = [o.metric for o in self.objectives if o.metric in unmeasurable]
        if bad:
            raise SpaceError(
                f"objective {bad[0]} cannot be measured through --endpoint (the server was not "
                "started by autotune); use a space without it"
            )
        params = {name: spec for name, spec in self.params.items() if name in REQUEST_PARAMS}
        constraints = self.constraints.model_copy(update={"memory_budget_mib": None})
        return self.model_copy(update={"params": params, "constraints": constraints})

    def runnable_here(self) -> tuple[SearchSpace, list[str]]:
        """This space without the choices that cannot run on this machine, and what was dropped.

        The reference must be runnable: every trial is compared with it.
        """
        from autotune.engines.availability import missing_reason

        reference = self.reference_config().model_dump()
        for name, value in reference.items():
            reason = missing_reason(name, value)
            if reason is not None:
                raise SpaceError(f"{self.source or self.name}: the reference needs {reason}")
        params = dict(self.params)
        dropped: list[str] = []
        for name, spec in self.params.items():
            if spec.choices is None:
                continue
            keep = [value for value in spec.choices if missing_reason(name, value) is None]
            dropped += [r for v in spec.choices if (r := missing_reason(name, v)) is not None]
            if len(keep) != len(spec.choices):
                params[name] = spec.model_copy(update={"choices": keep})
        restricted = self.model_copy(update={"params": params})
        return restricted, [f"dropped from the search: {reason}" for reason in dropped]

    def directions(self) -> list[str]:
        return [str(objective.direction) for objective in self.objectives]

    def resolve_path(self, value: str) -> str:
        """A path relative to the space file if it names one that exists; else unchanged."""
        if self.source is not None and not Path(value).is_absolute():
            candidate = (self.source.parent / value).resolve()
            if candidate.exists() or value.startswith("."):
                return str(candidate)
        return value


def _suggest_one(trial: optuna.trial.BaseTrial, name: str, spec: ParamSpec) -> Any:
    if spec.choices is not None:
        return trial.suggest_categorical(name, spec.choices)
    assert spec.low is not None and spec.high is not None
    if _is_int_param(name):
        step = int(spec.step) if spec.step else 1
        return trial.suggest_int(name, int(spec.low), int(spec.high), step=step, log=spec.log)
    return trial.suggest_float(name, spec.low, spec.high, step=spec.step, log=spec.log)


def _base_type(name: str) -> Any:
    """The field's type without Optional: int, float, bool, or a Literal."""
    annotation = TrialConfig.model_fields[name].annotation
    args = [arg for arg in get_args(annotation) if arg is not type(None)]
    return (
        args[0] if get_origin(annotation) in (Union, UnionType) and len(args) == 1 else annotation
    )


def _is_int_param(name: str) -> bool:
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
    for bound in ("low", "high"):
        value = getattr(spec, bound)
        _validate_value(
            name, int(value) if _is_int_param(name) else value, f"params.{name}.{bound}"
        )


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


def builtin_spaces() -> list[str]:
    return sorted(path.stem for path in BUILTIN_SPACES_DIR.glob("*.yaml"))


def find_space_file(name_or_path: str) -> Path:
    """A space name (file under search_spaces/) or a path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise SpaceError(f"space file '{name_or_path}' does not exist")
        return path
    builtin = BUILTIN_SPACES_DIR / f"{name_or_path}.yaml"
    if builtin.is_file():
        return builtin
    known = builtin_spaces()
    raise SpaceError(
        f"unknown space '{name_or_path}': {did_you_mean(name_or_path, known)}"
        f"built-in spaces: {', '.join(known)} "
        "(or give a path to a .yaml file)"
    )


def load_space(name_or_path: str) -> SearchSpace:
    """Load and validate a space; every problem is one SpaceError line naming file and field."""
    path = find_space_file(name_or_path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise SpaceError(f"{path}: malformed YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpaceError(f"{path}: cannot read the file: {exc}") from None
    if not isinstance(data, dict):
        raise SpaceError(f"{path}: a space file must be a YAML mapping of fields")
    data.setdefault("name", path.stem)
    try:
        space = SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(f"{path}: {_first_error(exc, top_level=True)}") from None
    space.source = path.resolve()
    return space


def _contains(spec: ParamSpec, value: Any) -> bool:
    if spec.choices is not None:
        return any(value == choice and type(value) is type(choice) for choice in spec.choices)
    if value is None or isinstance(value, bool):
        return False
    return spec.low <= value <= spec.high  # type: ignore[operator]
