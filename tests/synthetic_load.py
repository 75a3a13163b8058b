"""A load test's result built by hand: requests back to back at a chosen output-token rate.

Racing and the accuracy gate read a finished load (its timings and how it stopped); these tests
need one whose rate they choose, without an engine. Seeded, so a test reads the same load each
run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.measure.timing import RequestTiming
from autotune.records import SessionResult


def back_to_back_load(
    rate_per_s: float,
    seconds: float,
    *,
    spread: float,
    stop_reason: str,
    peak_memory_mib: float,
    environment: dict[str, Any],
) -> SessionResult:
    """Requests of 0.2 s each, give or take `spread` (a share), one after another for
    `seconds`, each carrying `rate_per_s` output tokens a second of its own time."""
    rng = np.random.default_rng(1)
    timings, at = [], 0.0
    while at < seconds:
        e2e = 0.2 * (1 + spread * float(rng.standard_normal()))
        tokens = max(1, round(rate_per_s * e2e))
        timings.append(RequestTiming(at, at + 0.02, at + e2e, at + e2e, tokens))
        at += e2e
    return _load_result(
        timings,
        min_warmup_s=0.2,
        stop_reason=stop_reason,
        peak_memory_mib=peak_memory_mib,
        environment=environment,
    )


def _load_result(
    timings: list[RequestTiming], *, min_warmup_s: float, **fields: Any
) -> SessionResult:
    """A load of `timings` from 0 that stopped as its last request ended (nothing in flight)."""
    at = timings[-1].end
    return SessionResult(
        load_s=at,
        load_start=0.0,
        load_stop=at,
        min_warmup_s=min_warmup_s,
        timings=timings,
        memory_source="rss",
        **fields,
    )


def capped_batch_one_load(*, context_only: bool) -> SessionResult:
    """A slow engine at batch 1 capped short: three requests of 128 tokens one after another,
    about 7 s each (the first a little longer: the first call compiles), stopped by its cap
    at 21.8 s after the third, every token arriving inside it at its decoding step. Its
    warm-up floor (four requests, the default space's, capped at its last) outlasts the load:
    no steady window. `context_only`: its plan's (MeasurePlan.context_only)."""
    timings, at = [], 0.0
    for e2e in (7.4, 7.2, 7.2):
        timings.append(RequestTiming(at, at + 0.3, at + e2e, at + e2e, 128))
        at += e2e
    return _load_result(
        timings,
        min_warmup_s=at,
        stop_reason="max_seconds",
        peak_memory_mib=500.0,
        environment={"clock": "wall clock"},
        context_only=context_only,
    )
