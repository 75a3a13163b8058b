"""What a study and its trials store, as typed records: the contract between the loop that
writes Optuna user attributes and `best`, `export`, `report` and `verify`, which read them.

Optuna keeps user attributes as JSON, one key at a time (a trial writes some as it starts, so a
crash still says what it was running). These models read them back whole: a known key with the
wrong type fails here, by name, not three layers up. A trial's figures are open-ended (the
metric registry, autotune.measure.registry), so a record allows keys it does not name; `figure`
reads one.

Both carry `schema_version` (autotune.SCHEMA_VERSION). A study stored before it was written has
none and reads as version 1; one written by a newer autotune, whose keys may mean something
else, is refused in one line rather than misread, and so is a version that is not a whole
number ("999" or 999.0 come from a hand edit, not from autotune).

Types are read strictly: a record that says `"batch_size": "x"`, `"is_reference": "yes"` or
`"accuracy": NaN` was edited or damaged, and is reported by field rather than coerced. Inside a
trial's parts (its environment, time split, ...: autotune.records.parts) a key of the wrong
kind reads as unknown instead, as it did when they were plain mappings; a part that is no
mapping is reported.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal, Self

import optuna
from optuna.trial import FrozenTrial
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from autotune import SCHEMA_VERSION
from autotune.errors import StudyError
from autotune.params import TrialConfig
from autotune.records.machine import Machine
from autotune.records.parts import (
    Environment,
    FloorVerdict,
    NotConfirmed,
    NotJudged,
    Owner,
    Paired,
    RaceCheck,
    Stepped,
    TimeSplit,
    _Part,
    stored_part,
)
from autotune.records.shape import value_problem

# A share (accuracy, a score): NaN passes no comparison, so it is refused where it is read.
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


def validation_problem(exc: ValidationError, prefix: str = "") -> str:
    """'field: what is wrong (the value)' for the first error pydantic found."""
    error = exc.errors()[0]
    where = prefix + ".".join(str(part) for part in error["loc"])
    shown = error.get("input")
    value = f" (got {shown!r:.60})" if isinstance(shown, str | int | float) else ""
    return f"{where.rstrip('.') or 'record'}: {error['msg']}{value}"


class _Stored(BaseModel):
    # extra="allow": figures and notes this model does not name stay readable.
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    schema_version: int = 1
    autotune_version: str | None = None

    # A part to write (`part`): its fields as given, in that order.
    _given: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def part(cls, **fields: Any) -> Self:
        """Some of the record's fields, to write (autotune.records.writer stores each), its
        parts typed (autotune.records.parts). Unchecked here: the writer checks them as part
        of the whole record, so a bad value fails in its trial, by field."""
        record = cls.model_construct(**fields)
        record._given = dict(fields)
        return record

    def joined(self, *others: Self) -> Self:
        """This part with the fields of `others` added, a later one's winning."""
        given = dict(self._given)
        for other in others:
            given.update(other._given)
        return self.part(**given)

    def written(self) -> dict[str, Any]:
        """What a part built by `part` stores, key by key: a typed part as its mapping."""
        return {
            key: value.written() if isinstance(value, _Part) else value
            for key, value in self._given.items()
        }

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """A stored null where the field has a value by default is that default: a trial
        recovered from the spool stores null for what it had not recorded yet (gpus on a
        machine without GPUs, is_reference of a sampled trial)."""
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            key: value
            for key, value in data.items()
            if value is not None or key not in fields or fields[key].default is None
        }

    @classmethod
    def problem(cls, attrs: dict[str, Any]) -> str | None:
        """What makes `attrs` unreadable as this record ('field: what is wrong'), or None."""
        return cls._validated(attrs)[1]

    @classmethod
    def _validated(cls, attrs: dict[str, Any]) -> tuple[Any, str | None]:
        """(the record, None), or (None, its problem)."""
        if not isinstance(attrs, dict):
            return None, "record: not a mapping of attributes"
        version = attrs.get("schema_version", 1)
        if type(version) is not int or version < 1:
            return None, (
                f"schema_version: {version!r} is not a record version (a whole number, 1 or more)"
            )
        if version > SCHEMA_VERSION:
            return None, (
                f"schema_version: {version} was stored by a newer autotune (this one reads up "
                f"to {SCHEMA_VERSION}): upgrade autotune to read it"
            )
        for key, value in attrs.items():  # before anything recurses into a value
            deep = value_problem(value)
            if deep is not None:
                return None, f"{key}: {deep}"
        try:
            record = cls.model_validate(attrs)
        except ValidationError as exc:
            return None, validation_problem(exc)
        problem = record._content_problem()
        return (None, problem) if problem is not None else (record, None)

    def _content_problem(self) -> str | None:
        """A problem the field types do not show (a subclass's check)."""
        return None

    @classmethod
    def _read(cls, attrs: dict[str, Any], what: str) -> Any:
        version = attrs.get("schema_version", 1) if isinstance(attrs, dict) else None
        if type(version) is int and version > SCHEMA_VERSION:
            raise StudyError(
                f"{what} was stored by a newer autotune (record version {version}; this one "
                f"reads up to {SCHEMA_VERSION}): upgrade autotune to read it"
            )
        record, problem = cls._validated(attrs)
        if problem is not None:
            raise StudyError(f"{what} has an unreadable record: {problem}")
        return record


# Environment entries of a launch started beside another (autotune.study.run.launches): on the
# trial that took it over, and on the reference it started beside (Environment names both).
STARTUP_BESIDE = "startup_beside"
MEASURED_BESIDE = "measured_beside"


class TrialRecord(_Stored):
    """One trial's user attributes (autotune.study.run.objective writes them).

    Its parts are typed (autotune.records.parts), all but `config`: that stays the mapping as
    stored, checked whole as a TrialConfig on reading (`trial_config` builds one). A TrialConfig
    would not hold it as stored: a configuration written before a parameter existed holds fewer
    keys, which it would fill with defaults, and readers ask which keys a trial recorded (the
    report's changed parameters, the steps' levels, a repeat against its twin); it would also
    turn a stored 1 into 1.0 and reorder what `best --json` shows as recorded.
    """

    config: dict[str, Any] = {}
    output_key: str | None = None
    is_reference: bool = False
    candidate: str | None = None
    # The deploy target's defaults measured as the study's baseline: its label
    # (autotune.space.engine_defaults), "LMDeploy's defaults".
    baseline: str | None = None
    launch_id: str | None = None
    launch_started: bool | None = None
    gpus: list[dict[str, Any]] = []
    gpu_share: float | None = None
    environment: Annotated[Environment, stored_part(Environment, optional=False)] = Environment()
    # None when it recorded no time (an empty split too, as it always read).
    time_s: Annotated[TimeSplit | None, stored_part(TimeSplit)] = None
    # Constraint values (<= 0: satisfied), and the reasons the floor or a budget refused it.
    constraints: dict[str, FiniteFloat] | None = None
    infeasible_because: list[str] | None = None
    deployable: bool | None = None
    deployability: str | None = None
    # A proposal that repeated a measured configuration copies that trial's record.
    duplicate_of: int | None = None
    # The trial whose answers it reused, or "cache:<entry>" (autotune.accuracy.answers_cache).
    accuracy_reused_from: int | str | None = None
    answers_computed: int | None = None
    accuracy: Fraction | None = None
    accuracy_by_category: dict[str, Fraction] = {}
    item_scores: dict[str, Fraction] = {}
    item_passed: dict[str, bool] = {}
    predictions: dict[str, str] = {}
    # Dummy weights: each timed answer's tokens (autotune.accuracy.timed), never its text.
    accuracy_timed_tokens: dict[str, int] = {}
    sample_outputs_artifact: str | None = None
    paired_vs_reference: Annotated[Paired | None, stored_part(Paired)] = None
    # The sequential floor's verdict on an absolute floor (autotune.accuracy.sequential).
    accuracy_floor: Annotated[FloorVerdict | None, stored_part(FloorVerdict)] = None
    # Why its accuracy was not judged (autotune.study.run.accuracy_gate): None where it was.
    accuracy_not_judged: Annotated[NotJudged | None, stored_part(NotJudged)] = None
    # Why the floor passed it but it answered no held-out item (autotune.study.run.
    # accuracy_gate): slower than a trial already confirmed. None where it was confirmed.
    confirmation_skipped: Annotated[NotConfirmed | None, stored_part(NotConfirmed)] = None
    measure_stop_reason: str | None = None
    # The study's first deployable figure, measured to a looser interval so that the first
    # steps, which race it, start sooner (autotune.study.run.reference_load).
    first_figure: bool | None = None
    # Stopped by racing (autotune.study.run.racing): the incumbent it lost to, and why.
    raced_by: int | None = None
    raced_reason: str | None = None
    # A stop checked against the incumbent measured again beside it, kept or withdrawn.
    race_check: Annotated[RaceCheck | None, stored_part(RaceCheck)] = None
    # The one-lever step from an incumbent the trial was proposed as
    # (autotune.study.proposals.steering).
    step: Annotated[Stepped | None, stored_part(Stepped)] = None
    owner: Annotated[Owner | None, stored_part(Owner)] = None
    # The machine that measured it and its comparison group (autotune.records.machine).
    machine: Annotated[Machine | None, stored_part(Machine)] = None
    failure_kind: str | None = None
    failure_reason: str | None = None
    log_tail: str | None = None

    @classmethod
    def of(cls, trial: FrozenTrial) -> TrialRecord:
        return cls.from_attrs(trial.user_attrs, number=trial.number)

    def untimed(self) -> TrialRecord:
        """This part without its time split: a trial writes its own, whole, as it ends."""
        return self.part(**{k: v for k, v in self._given.items() if k != "time_s"})

    @property
    def times(self) -> TimeSplit:
        """Its seconds by part; all none when it recorded no time."""
        return self.time_s if self.time_s is not None else TimeSplit()

    @property
    def backend(self) -> str | None:
        """The engine its configuration names; None when none was recorded."""
        backend = self.config.get("backend")
        return backend if isinstance(backend, str) else None

    @property
    def started_beside(self) -> bool:
        """Its launch started while the reference started and measured (the start-up in
        its time split is only what it still waited for)."""
        return self.environment.startup_beside is not None

    @property
    def measured_beside(self) -> str | None:
        """What started beside it while it measured (a reference only), or None."""
        return self.environment.measured_beside

    def _content_problem(self) -> str | None:
        """Its configuration's problem: `export` renders it and `verify` relaunches it, so a
        configuration no engine takes is found on reading."""
        if not self.config:
            return None
        try:
            TrialConfig.model_validate(self.config, strict=True)
        except ValidationError as exc:
            return validation_problem(exc, prefix="config.")
        return None

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any], *, number: int) -> TrialRecord:
        record: TrialRecord = cls._read(attrs, f"trial {number}")
        return record

    def trial_config(self) -> TrialConfig:
        return TrialConfig(**self.config)

    def figure(self, name: str) -> float | None:
        """A recorded figure (a metric with its unit in the name); None when not recorded."""
        value = (self.model_extra or {}).get(name)
        if value is None:
            value = getattr(self, name, None) if name in type(self).model_fields else None
        return float(value) if isinstance(value, int | float) else None

    def throughput_interval_rel(self) -> float | None:
        """The throughput's relative half-width, launch spread included where recorded; None
        when the trial has no finite interval."""
        for name in ("throughput_ci_rel", "throughput_ci_within_rel"):
            value = self.figure(name)
            if value is not None and math.isfinite(value):
                return value
        return None


class _BasisPart(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class EvalsetBasis(_BasisPart):
    """The evaluation set a study's comparisons rest on: its name and two hashes."""

    name: str
    items: str
    images: str


class ComparisonBasis(_BasisPart):
    """What every comparison of a study rests on (autotune.study.start.opening writes it): a
    resume with another set, reference, floor or searched parameters is refused. Typed, so a
    damaged basis is named as damage, not read as another evaluation set (None -> smoke)."""

    evalset: EvalsetBasis
    reference: dict[str, Any]
    floor: dict[str, Any]
    params: dict[str, Any]


class StudyRecord(_Stored):
    """A study's user attributes (autotune.study.plan.study_attrs writes them at creation)."""

    comparison_basis: ComparisonBasis | None = None
    space_name: str | None = None
    space_file: str | None = None
    space: dict[str, Any] = {}
    model: str | None = None
    model_path: str | None = None
    evalset: str | None = None
    objective_metrics: list[str] = []
    endpoint: str | None = None
    deploy_target: str | None = None
    image_geometry: dict[str, Any] | None = None
    notes: list[Any] = []
    dummy_weights: bool = False
    adapters: list[dict[str, Any]] = []
    quantized_checkpoints: dict[str, str] = {}
    quantized_paths: dict[str, str] = {}
    floor_warning: str | None = None

    @classmethod
    def of(cls, study: optuna.Study) -> StudyRecord:
        record: StudyRecord = cls._read(study.user_attrs, f"study {study.study_name!r}")
        return record

    @property
    def gpu_price_per_hour(self) -> float | None:
        """The space's hourly price of the machine (USD), or None: no price was given."""
        price = self.space.get("gpu_price_per_hour")
        return float(price) if isinstance(price, int | float) and price > 0 else None


class _SpoolFile(BaseModel):
    """A JSON file autotune keeps in the spool (autotune.study.store.recovery writes and
    reads it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    number: int = Field(ge=0)
    # When the trial started: tells its own study's trial from one of an earlier study of the
    # same name at the same path. None in a spool file written before it was recorded.
    started: datetime | None = None

    @classmethod
    def read(cls, text: str) -> Any:
        """The record in `text`; ValueError('field: what is wrong') when it is none."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise ValueError(validation_problem(exc)) from None


class SpooledTrial(_SpoolFile):
    """A measured trial kept until the storage takes it: a file that does not read as one is
    no measurement to record. COMPLETE with its objective values, or PRUNED (stopped by
    racing) with its partial figures in `user_attrs` and no values."""

    state: Literal["COMPLETE", "PRUNED"] = "COMPLETE"
    values: list[FiniteFloat] = []
    params: dict[str, Any] = {}
    # Optuna's distribution_to_json of each parameter's distribution.
    distributions: dict[str, str] = {}
    user_attrs: dict[str, Any]

    @model_validator(mode="after")
    def _values_match_the_state(self) -> SpooledTrial:
        if self.state == "COMPLETE" and not self.values:
            raise ValueError("a completed trial has at least one objective value")
        if self.state == "PRUNED" and self.values:
            raise ValueError("a trial stopped by racing has no objective values")
        return self

    @classmethod
    def read(cls, text: str) -> SpooledTrial:
        spooled: SpooledTrial = super().read(text)
        problem = TrialRecord.problem(spooled.user_attrs)
        if problem is not None:
            raise ValueError(f"user_attrs.{problem}")
        return spooled


class FailureNote(_SpoolFile):
    """Why a trial ended, kept when the storage refused to take it (a full disk): the next
    run records it, so no trial stays failed without a reason."""

    kind: str
    reason: str
