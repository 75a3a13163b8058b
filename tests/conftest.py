"""Shared fixtures, one torch thread per process, and Ctrl-C that reaches the commands."""

from __future__ import annotations

import os
import signal

import pytest
from study_factory import build_study  # imports no torch: the setting below still applies

# The suite runs two test files at a time (pytest-xdist, README "Tests"), and each starts
# workers and servers of its own: with torch's default of one thread per core, two studies on
# two cores oversubscribe them, OpenMP's waiting threads spin, and a load test capped at 2 s
# measures half as much (the suite took 1030 s that way, 590 s with one thread each). Set
# here, before anything imports torch, so every child process inherits it.
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

# A suite started in the background by a shell without job control (`cmd &` in a script)
# inherits SIGINT ignored, and so would every command it starts: the Ctrl-C tests would test
# nothing and fail. Python's own handler here; the commands it starts get the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def small_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A finished study like `autotune run` stores (tests/study_factory.py): (url, name).

    Built once per session: tests only read it (`autotune dashboard` is read-only by default).
    """
    return build_study(tmp_path_factory.mktemp("study"))
