"""One server launch (autotune.engines.server_launch) without a server: what its failures
read as, and a launch refused before it starts. The launches themselves, with real processes,
are tests/engines/test_server_runner.py's."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from autotune.engines.server_launch import ServerLaunch, as_oom
from autotune.errors import TrialFailure
from autotune.export import Export
from autotune.params import TrialConfig


@pytest.mark.parametrize(
    ("kind", "log_tail", "read_as"),
    [
        ("crash", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "oom"),
        ("request", "RuntimeError: CUDA error: out of memory", "oom"),
        ("crash", "ValueError: unknown model", "crash"),
        ("timeout", "CUDA out of memory", "timeout"),  # a time-out stays one
    ],
)
def test_a_failure_whose_log_says_the_memory_ran_out_is_oom(
    kind: str, log_tail: str, read_as: str
) -> None:
    failure = as_oom(TrialFailure("the server exited", kind=kind, log_tail=log_tail))
    assert failure.kind == read_as
    assert (failure.reason, failure.log_tail) == ("the server exited", log_tail)


def test_a_launch_refused_before_it_starts_leaves_nothing_and_closes_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A format with no server command: refused before any process or work folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a work folder would go
    launch = ServerLaunch(
        render=lambda _config, _port: Export(format="yaml", argv=[]),
        launch=TrialConfig(),
        fmt="yaml",
        device="cpu",
        startup_timeout_s=5.0,
    )
    with pytest.raises(TrialFailure, match="has no server command") as info:
        launch.begin()
    assert info.value.kind == "unsupported"
    assert launch.server is None and not launch.alive()
    launch.close()
    launch.close()
    assert not list(tmp_path.iterdir())
