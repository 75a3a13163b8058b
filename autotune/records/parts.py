"""The typed parts of a trial's record: where it ran, how its time was spent, how its answers
compared with the reference's, the absolute floor's verdict, the step it was proposed as,
who runs it, and a racing stop checked against the incumbent measured again.

A trial stores each as a JSON mapping (Optuna keeps JSON); TrialRecord reads each into its
model here. Their keys are read here and nowhere else: a reader outside autotune.records asks
`record.environment.runner`, not `record.environment["runner"]`, so a renamed key is one edit,
and a misspelt one an AttributeError instead of a silent None
(tests/architecture/test_architecture.py counts the string reads left outside).

Reading stays as tolerant as it was when these were plain mappings: a key of the wrong kind (a
hand edit) reads as unknown and the rest still reads, and a key a model does not name (from an
older or a newer autotune) is left aside, except in the environment, where engines add their
versions and flags. Only what is no mapping at all fails, as it did. Each part keeps the
mapping it was read from (`stored`): `best --json` and the report show a trial's time and
environment as written, in their order, with keys this version does not name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, PrivateAttr, ValidationError
from pydantic_core import PydanticCustomError

# A parameter's value as a configuration stores it (autotune.params.TrialConfig).
ParamValue = bool | int | float | str | None


class _Part(BaseModel):
    # extra="ignore": a key an older or newer autotune wrote is no field here (it stays in
    # `stored`). Lax, as these parts were read before they were typed: "1.5" seconds is 1.5.
    model_config = ConfigDict(extra="ignore", frozen=True)

    _stored: dict[str, Any] = PrivateAttr(default_factory=dict)
    _read: bool = PrivateAttr(default=False)  # read from a stored mapping (`of`)

    @classmethod
    def of(cls, mapping: Mapping[str, Any] | None) -> Self:
        data = dict(mapping or {})
        try:
            part = cls.model_validate(data)
        except ValidationError as exc:
            # A field of the wrong kind (a hand edit) reads as unknown; the rest still reads.
            bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
            part = cls.model_validate({k: v for k, v in data.items() if k not in bad})
        part._stored, part._read = data, True
        return part

    def stored(self) -> dict[str, Any]:
        """The mapping as the trial stored it (a copy)."""
        return dict(self._stored)

    def written(self) -> dict[str, Any]:
        """What a trial stores of it (autotune.records.writer): the mapping it was read from,
        as it was, or the fields one built here was given."""
        return self.stored() if self._read else self.model_dump(exclude_unset=True)

    def __eq__(self, other: object) -> bool:
        # A part is its fields: the mapping it was read from does not tell two apart
        # (pydantic's own comparison would; its hash, of the fields, stays).
        if not isinstance(other, _Part):
            return NotImplemented
        return (
            type(self) is type(other)
            and self.__dict__ == other.__dict__
            and self.__pydantic_extra__ == other.__pydantic_extra__
        )


def stored_part(kind: type[_Part], *, optional: bool = True) -> BeforeValidator:
    """TrialRecord's reading of a part: a stored mapping read by `kind.of`; an empty one is
    none recorded (None) where the part is optional, as every reader took an empty mapping.
    What is no mapping fails with the words it failed with as a plain mapping."""

    def read(value: Any) -> Any:
        if value is None or isinstance(value, kind):
            return value
        if not isinstance(value, dict):
            raise PydanticCustomError("dict_type", "Input should be a valid dictionary")
        return kind.of(value) if value or not optional else None

    return BeforeValidator(read)


class Environment(_Part):
    """Where and with what a trial ran (autotune.engines.measurement and the sessions)."""

    # extra="allow": engines add their versions and flags, which the report shows.
    model_config = ConfigDict(extra="allow", frozen=True)

    runner: str | None = None  # "inprocess", "server" or "endpoint"
    clock: str | None = None  # which clock timed the load (autotune.engines.inprocess.clock)
    server_format: str | None = None  # the deploy target a server launch was started as
    server_command: str | None = None  # the command that started it
    export_exact: str | None = None  # "false" when the export cannot express the trial
    endpoint: str | None = None
    launch_id: str | None = None
    # A launch started beside another (autotune.study.run.launches): on the trial that took it
    # over, and on the reference it started beside; each says so in words.
    startup_beside: str | None = None
    measured_beside: str | None = None
    # The load the load test ran under (autotune.measure.cpu_load): the share of its runnable
    # time the engine waited for a core, the share of time some task on the machine waited,
    # and the 1-minute load average at its end.
    engine_wait_share: float | None = None
    cpu_pressure_share: float | None = None
    load_average_1m: float | None = None

    def engine_name(self, backend: str) -> str:
        """The engine that answered, in words, for the line that names it."""
        if self.runner == "endpoint":
            return f"the endpoint {self.endpoint or '?'}"
        if self.server_format:
            return f"the {self.server_format} server"
        return f"the {backend} engine"


class TimeSplit(_Part):
    """A trial's seconds by part (autotune.study.run.objective times them;
    autotune.study.results.timeshare sums them). NaN where a part could not be timed (an
    endpoint's start-up: autotune did not start it)."""

    startup: float = 0.0  # what the trial waited for its launch to start
    gpu_wait: float = 0.0  # for GPUs another launch held
    twin_wait: float = 0.0  # for a twin trial measured elsewhere
    proposal: float = 0.0  # the sampler's proposal, with the configuration's writes
    study_reads: float = 0.0  # the reads of the study before measuring
    engine_call: float = 0.0  # the engine's whole call: its phases below and the hand-off
    warmup: float = 0.0  # the engine's explicit warm-up (compilation)
    measuring: float = 0.0
    screening: float = 0.0
    accuracy: float = 0.0  # the accuracy pass
    recording: float = 0.0
    total: float = 0.0

    def finite(self, part: str) -> float:
        """A part's seconds by its name (autotune.study.results.timeshare.PARTS), none where
        it could not be timed."""
        if part not in type(self).model_fields:
            raise AttributeError(f"a trial's time split has no part {part!r}")
        value: float = getattr(self, part)
        return value if math.isfinite(value) else 0.0


class Owner(_Part):
    """Who runs a trial: enough to tell, on its host, whether that process is still there."""

    host: str | None = None
    pid: int | None = None
    started: float | None = None  # the process's creation time (psutil), seconds
    # Its worker's slot (from 0) in a run of several workers (--gpus); none with one: the
    # level a confirmation is tested at depends on it (autotune.accuracy.confirm).
    worker: int | None = None


class _StrictPart(_Part):
    # Strict: their readers took numbers only (a "0.5" or a true was no figure), so a value
    # of another kind reads as unknown rather than coerced.
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class _Judged(_StrictPart):
    """An accuracy judged over a number of items: its interval, at a confidence, and the
    sequential test's decision ("feasible", "infeasible" or "undecided")."""

    n_items: int | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None
    decision: str | None = None


class Paired(_Judged):
    """The paired comparison with the reference on the same items
    (autotune.accuracy.paired.PairedComparison writes it); the interval is of the mean
    difference."""

    accuracy_diff: float | None = None  # candidate minus reference, mean over shared items
    only_candidate_passed: int | None = None
    only_reference_passed: int | None = None
    mcnemar_p: float | None = None
    test: str | None = None  # "bootstrap" or "sequential" (only this one decides)


class FloorVerdict(_Judged):
    """The sequential floor's verdict on an absolute floor
    (autotune.accuracy.sequential.FloorLook writes it); the interval is of the accuracy."""

    mean_diff: float | None = None  # the accuracy (minus nothing: an absolute floor)


class Confirmed(_StrictPart):
    """A trial's verdict on the held-out items (autotune.accuracy.confirm.Confirmation writes
    it, as the record's `confirmation`): "confirmed" or "not confirmed", the study's
    confirmation it was (`index`) and its error, the items it answered of the held-out slice."""

    decision: str | None = None
    index: int | None = None
    error: float | None = None
    n_items: int | None = None
    holdout_items: int | None = None
    holdout_digest: str | None = None
    mean_diff: float | None = None
    ci_low: float | None = None

    def shown(self) -> dict[str, Any]:
        """What `best --json` shows of a confirmed trial's verdict."""
        return {
            "items": self.n_items,
            "holdout_items": self.holdout_items,
            "holdout_digest": self.holdout_digest,
            "confirmation": self.index,
            "error": self.error,
        }


class NotJudged(_StrictPart):
    """Why a trial's accuracy was not judged (autotune.study.run.accuracy_gate writes it, as
    the record's `accuracy_not_judged`): its load test already missed the memory budget or the
    latency SLO, so it is infeasible whatever it answers, or it is no measurement and the
    trial fails. Its accuracy constraint is 0:
    unknown, never a verdict. (Records of an earlier rule may say "slower" with the trial it
    did not beat, `record_trial`.)"""

    reason: str | None = None  # "memory", "latency" or "no-measurement" (the trial fails)
    record_trial: int | None = None  # an earlier rule's record it did not beat ("slower")
    words: str | None = None  # the reason in words, as the lines show it

    def line(self) -> str:
        """'accuracy not judged: its load test is over the memory budget'."""
        return f"accuracy not judged: {self.words or self.reason or 'unknown reason'}"


class NotConfirmed(_StrictPart):
    """Why a trial the search floor passed answered none of the held-out items
    (autotune.study.run.accuracy_gate writes it, as the record's `confirmation_skipped`): it
    was slower than trial `confirmed_trial`, already confirmed (or the reference, which may be
    recommended), so it could never be recommended (autotune.accuracy.confirm)."""

    confirmed_trial: int | None = None
    words: str | None = None  # the reason in words, as the lines show it

    def line(self) -> str:
        """'not confirmed: slower than trial #3, already confirmed'."""
        return f"not confirmed: {self.words or 'slower than a confirmed trial'}"


class Stepped(_StrictPart):
    """The one-lever step from an incumbent a trial was proposed as
    (autotune.study.proposals.steering.Step.describe writes it)."""

    lever: str | None = None
    value: ParamValue = None
    from_trial: int | None = None
    also: list[str] = []  # the other levers the step changed


class RaceCheck(_StrictPart):
    """A racing stop checked on a busy machine (autotune.study.run.racing.checked_stop): the
    incumbent measured again on the racing trial's launch right after its stop, so both saw
    the same load, and whether the stop was kept. Rates in output tokens/s, intervals as
    relative half-widths, loads as the share of its runnable time each engine waited for a
    core (none where not measured)."""

    incumbent: int | None = None  # the trial it raced
    kept: bool | None = None  # False: the stop was withdrawn and the trial measured in full
    tokens_per_s: float | None = None  # the racing load's, as it stopped
    ci_rel: float | None = None
    wait_share: float | None = None
    incumbent_tokens_per_s: float | None = None  # the incumbent measured now
    incumbent_ci_rel: float | None = None
    incumbent_wait_share: float | None = None
    incumbent_measured_s: float | None = None
    recorded_tokens_per_s: float | None = None  # the incumbent's recorded figure
    recorded_wait_share: float | None = None


class Failure(_Part):
    """Why a trial failed: its kind ("oom", "lost", ...) and reason, None where not recorded
    (autotune.study.store.recovery reads it from the trial or its study)."""

    failure_kind: str | None = None
    failure_reason: str | None = None

    @classmethod
    def recorded(cls, attrs: Mapping[str, Any]) -> Failure:
        """The failure `attrs` record, each in words (an empty one: none recorded)."""
        keys = ("failure_kind", "failure_reason")
        return cls.of({key: str(attrs[key]) for key in keys if attrs.get(key)})

    def __bool__(self) -> bool:
        return bool(self.failure_kind or self.failure_reason)


def with_entries(environment: Mapping[str, Any], **entries: Any) -> dict[str, Any]:
    """An environment's mapping with `entries` (Environment's fields) added or replaced."""
    unknown = set(entries) - set(Environment.model_fields)
    if unknown:
        raise TypeError(f"an environment has no field {sorted(unknown)[0]!r}")
    return {**environment, **entries}


def same_configuration(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two trials' attributes record the same configuration."""
    return a.get("config") == b.get("config")


def owner_of(attrs: Mapping[str, Any]) -> Owner | None:
    """The owner a trial's attributes record, or None (none, or not a mapping). A field of
    the wrong kind (a hand edit) reads as unknown, so the rest can still be judged."""
    recorded = attrs.get("owner")
    return Owner.of(recorded) if isinstance(recorded, Mapping) else None
