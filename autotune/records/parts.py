"""Typed views of the parts a trial keeps as JSON mappings: where it ran, how its time was
spent, who ran it.

A trial stores these as plain mappings (Optuna keeps JSON, and engines add their own keys:
versions, a server's flags), and TrialRecord checks that each is a mapping. Their keys are
read here and nowhere else: a reader outside autotune.records asks `record.env.runner`, not
`record.environment["runner"]`, so a renamed key is one edit, and a misspelt one a type error
instead of a silent None (tests/architecture/test_architecture.py counts the string reads left
outside).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError


class _View(BaseModel):
    # extra="allow": engines add versions and flags this view does not name.
    model_config = ConfigDict(extra="allow", frozen=True)

    @classmethod
    def of(cls, mapping: Mapping[str, Any] | None) -> Self:
        data = dict(mapping or {})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            # A field of the wrong kind (a hand edit) reads as unknown; the rest still reads.
            bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
            return cls.model_validate({k: v for k, v in data.items() if k not in bad})


class Environment(_View):
    """Where and with what a trial ran (autotune.engines.measurement and the sessions)."""

    runner: str | None = None  # "inprocess", "server" or "endpoint"
    clock: str | None = None  # which clock timed the load (autotune.engines.inprocess.clock)
    server_format: str | None = None  # the deploy target a server launch was started as
    server_command: str | None = None  # the command that started it
    export_exact: str | None = None  # "false" when the export cannot express the trial
    endpoint: str | None = None
    launch_id: str | None = None

    def engine_name(self, backend: str) -> str:
        """The engine that answered, in words, for the line that names it."""
        if self.runner == "endpoint":
            return f"the endpoint {self.endpoint or '?'}"
        if self.server_format:
            return f"the {self.server_format} server"
        return f"the {backend} engine"


class TimeSplit(_View):
    """A trial's seconds by part (autotune.study.results.timeshare names them all)."""

    startup: float = 0.0  # what the trial waited for its launch to start
    gpu_wait: float = 0.0  # for GPUs another launch held
    twin_wait: float = 0.0  # for a twin trial measured elsewhere
    warmup: float = 0.0  # the engine's explicit warm-up (compilation)
    accuracy: float = 0.0  # the accuracy pass
    total: float = 0.0


class Owner(_View):
    """Who runs a trial: enough to tell, on its host, whether that process is still there."""

    host: str | None = None
    pid: int | None = None
    started: float | None = None  # the process's creation time (psutil), seconds


def same_configuration(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two trials' attributes record the same configuration."""
    return a.get("config") == b.get("config")


def owner_of(attrs: Mapping[str, Any]) -> Owner | None:
    """The owner a trial's attributes record, or None (none, or not a mapping). A field of
    the wrong kind (a hand edit) reads as unknown, so the rest can still be judged."""
    recorded = attrs.get("owner")
    return Owner.of(recorded) if isinstance(recorded, Mapping) else None
