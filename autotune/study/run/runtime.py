"""What the study loop takes from the world: its clock and the ways it starts a launch.

A real run uses `REAL`: `time.perf_counter`, autotune.engines.open_session and
autotune.engines.begin_session (a server started in the background). The replay
benchmark (bench/cpu/replay.py) passes a simulated clock and a simulated engine instead, so
the same loop runs against a measured response surface without anything patched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from autotune.engines import EngineSession, PendingSession, begin_session, open_session

# open_session's signature (space, launch, keyword arguments) -> a running EngineSession.
SessionOpener = Callable[..., EngineSession]
# begin_session's: the same arguments -> a launch coming up, or None (cannot start so).
SessionBeginner = Callable[..., PendingSession | None]


@dataclass(frozen=True)
class Runtime:
    """`clock`: seconds, for the trials' time split (monotonic). `open_session`: starts one
    launch of an engine. `begin_session`: starts one without waiting for it."""

    clock: Callable[[], float] = time.perf_counter
    open_session: SessionOpener = open_session
    begin_session: SessionBeginner = begin_session


REAL = Runtime()
