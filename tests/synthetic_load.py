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
    return SessionResult(
        load_s=at,
        load_start=0.0,
        load_stop=at,
        min_warmup_s=0.2,
        timings=timings,
        stop_reason=stop_reason,
        peak_memory_mib=peak_memory_mib,
        memory_source="rss",
        environment=environment,
    )
