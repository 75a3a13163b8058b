"""The contracts at the bottom (autotune.records): what one layer hands the next."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from autotune.measure.timing import RequestTiming
from autotune.records import SessionResult


def result(**changed: object) -> SessionResult:
    values: dict[str, object] = {
        "load_start": 10.0,
        "load_stop": 20.0,
        "timings": [RequestTiming(10.0, 10.2, 10.9, 11.0, 8, 4, (10.2, 10.4, 10.6, 10.9))],
        "peak_memory_mib": 512.0,
        "memory_source": "rss",
        "environment": {"runner": "inprocess"},
    }
    return SessionResult(**{**values, **changed})


def test_a_session_result_crosses_the_worker_pipe_unchanged() -> None:
    """The worker sends its result as JSON lines; the parent reads back the same result, a
    NaN figure (memory unknown) included."""
    sent = result(peak_memory_mib=math.nan, predictions={"a": "text"}, stop_reason="converged")
    received = SessionResult.model_validate(json.loads(json.dumps(sent.model_dump())))
    assert math.isnan(received.peak_memory_mib)
    assert received.model_dump(exclude={"peak_memory_mib"}) == sent.model_dump(
        exclude={"peak_memory_mib"}
    )
    assert received.timings[0].chunk_times == (10.2, 10.4, 10.6, 10.9)


def test_a_misspelt_or_missing_field_fails_where_the_result_is_made() -> None:
    with pytest.raises(ValidationError, match="stop_reasn"):
        result(stop_reasn="converged")
    with pytest.raises(ValidationError, match="memory_source"):
        SessionResult(
            load_start=0.0, load_stop=1.0, timings=[], peak_memory_mib=1.0, environment={}
        )
