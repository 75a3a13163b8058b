"""A study against the fake OpenAI server in endpoint mode: the server up and answering for the
block, the real `autotune run` through it (tests/study/run/test_racing.py,
tests/engines/test_server_screening.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fake_server import FAKE, autotune, token, wait_answering

from autotune.engines import server_process as server_runner


@contextmanager
def fake_endpoint(*args: str) -> Iterator[str]:
    """tests/fake_openai_server.py with `args`, answering on a free port; its /v1/ URL."""
    marker = token()
    port = server_runner.free_port()
    fake = subprocess.Popen(
        [sys.executable, FAKE, "--port", str(port), "--model", marker, *args],
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_answering(port, marker)
        yield f"http://127.0.0.1:{port}/v1/"
    finally:
        fake.kill()
        fake.wait()


def endpoint_study(space: Path, study: str, storage: str, url: str) -> str:
    """`autotune run` of `space` measuring `url`; its stderr, once it has exited 0."""
    run = autotune("run", "--space", str(space), "--study", study, "--storage", storage,
                   "--endpoint", url)  # fmt: skip
    _, err = run.communicate(timeout=600)
    assert run.returncode == 0, err[-3000:]
    return err
