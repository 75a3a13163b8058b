"""What a study and its trials store, as typed records: the contract between the loop that
writes Optuna user attributes and `best`, `export`, `report` and `verify`, which read them.

Optuna keeps user attributes as JSON, one key at a time (a trial writes some as it starts, so a
crash still says what it was running). These models read them back whole: a known key with the
wrong type fails here, by name, not three layers up. A trial's figures are open-ended (the
metric registry, autotune.measure.registry), so a record allows keys it does not name; `figure`
reads one.

Both carry `schema_version` (autotune.SCHEMA_VERSION). A study stored before it was written has
none and reads as version 1; one written by a newer autotune, whose keys may mean something
else, is refused in one line rather than misread.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from autotune import SCHEMA_VERSION
from autotune.errors import StudyError
from autotune.params import TrialConfig


class _Stored(BaseModel):
    # extra="allow": figures and notes this model does not name stay readable.
    model_config = ConfigDict(extra="allow", frozen=True)

    schema_version: int = 1
    autotune_version: str | None = None

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
    def _read(cls, attrs: dict[str, Any], what: str) -> Any:
        version = attrs.get("schema_version", 1)
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise StudyError(
                f"{what} was stored by a newer autotune (record version {version}; this one "
                f"reads up to {SCHEMA_VERSION}): upgrade autotune to read it"
            )
        try:
            return cls.model_validate(attrs)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise StudyError(f"{what} has an unreadable record: {where}: {error['msg']}") from None


class TrialRecord(_Stored):
    """One trial's user attributes (autotune.study.objective writes them)."""

    config: dict[str, Any] = {}
    output_key: str | None = None
    is_reference: bool = False
    candidate: str | None = None
    launch_id: str | None = None
    launch_started: bool | None = None
    gpus: list[dict[str, Any]] = []
    gpu_share: float | None = None
    environment: dict[str, Any] = {}
    time_s: dict[str, Any] = {}
    # Constraint values (<= 0: satisfied), and the reasons the floor or a budget refused it.
    constraints: dict[str, float] | None = None
    infeasible_because: list[str] | None = None
    deployable: bool | None = None
    deployability: str | None = None
    # A proposal that repeated a measured configuration copies that trial's record.
    duplicate_of: int | None = None
    accuracy_reused_from: int | None = None
    answers_computed: int | None = None
    accuracy: float | None = None
    accuracy_by_category: dict[str, float] = {}
    item_scores: dict[str, float] = {}
    item_passed: dict[str, bool] = {}
    predictions: dict[str, str] = {}
    sample_outputs_artifact: str | None = None
    paired_vs_reference: dict[str, Any] | None = None
    measure_stop_reason: str | None = None
    owner: dict[str, Any] | None = None
    failure_kind: str | None = None
    failure_reason: str | None = None
    log_tail: str | None = None

    @classmethod
    def of(cls, trial: FrozenTrial) -> TrialRecord:
        return cls.from_attrs(trial.user_attrs, number=trial.number)

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


class StudyRecord(_Stored):
    """A study's user attributes (autotune.study.plan.study_attrs writes them at creation)."""

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
