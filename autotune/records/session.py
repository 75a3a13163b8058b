"""What one trial's session returns, the same for every engine: a typed contract.

An in-process worker (sent as JSON), a server launch and an endpoint each measure one trial's
passes and return a SessionResult; autotune.engines.measurement turns it into the trial's
figures. A field that is missing, misspelt or of the wrong type fails where it is made, not
three layers up.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from autotune.measure.timing import RequestTiming


class PassesResult(BaseModel):
    """One trial's phases on an engine: its load test and accuracy answers (what
    autotune.engines.phases measures; the session adds memory and where it ran)."""

    model_config = ConfigDict(extra="forbid")

    warmup_s: float = Field(0.0, description="Explicit warm-up before the load (compilation).")
    load_s: float = Field(0.0, description="The load test, its warm-up and drain included.")
    load_start: float = Field(description="When the load began (perf_counter seconds).")
    load_stop: float = Field(description="When the load stopped sending.")
    min_warmup_s: float = Field(0.0, description="The load's start that is warm-up at least.")
    accuracy_s: float = Field(0.0, description="The accuracy pass.")
    screening_s: float = Field(0.0, description="Screening on a subset, before the load.")
    timings: list[RequestTiming] = Field(description="Every load-test request, in order.")
    stop_reason: str = Field("", description="Why the load stopped (converged, a cap, ...).")
    stop_rule_trail: list[dict[str, Any]] = Field(
        default_factory=list, description="What the stop rule saw every few seconds."
    )
    predictions: dict[str, str] = Field(default_factory=dict, description="item id -> answer.")
    timed_tokens: dict[str, int] = Field(
        default_factory=dict, description="A timed pass's item id -> tokens its answer held."
    )
    screened_out: bool = Field(False, description="Screening put it below the floor.")
    repeated_requests: int = Field(0, description="Requests that resent an earlier image.")
    context_only: bool = Field(
        False, description="Its plan's: a load too short for a window is read without one."
    )


class SessionResult(PassesResult):
    """One trial's load test, accuracy answers, memory and where it ran."""

    peak_memory_mib: float = Field(description="Peak memory of the trial (NaN when unknown).")
    memory_source: str = Field(description="Where the peak was read (nvml, cuda, rss, ...).")
    environment: dict[str, str] = Field(description="Where and with what the trial ran.")
