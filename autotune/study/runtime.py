"""What the study loop takes from the world: its clock and the way it opens a launch.

A real run uses `REAL`: `time.perf_counter` and autotune.engines.open_session. The replay
benchmark (bench/cpu/replay.py) passes a simulated clock and a simulated engine instead, so
the same loop runs against a measured response surface without anything patched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from autotune.engines import EngineSession, open_session

# open_session's signature (space, launch, keyword arguments) -> a running EngineSession.
SessionOpener = Callable[..., EngineSession]


@dataclass(frozen=True)
class Runtime:
    """`clock`: seconds, for the trials' time split (monotonic). `open_session`: starts one
    launch of an engine."""

    clock: Callable[[], float] = time.perf_counter
    open_session: SessionOpener = open_session


REAL = Runtime()
