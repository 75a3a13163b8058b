"""The fake OpenAI server (fake_openai_server.py) as the server tests drive it: its script, a
render function that starts it as an engine's command, the token that marks its processes and
what is left of them, and the real command line in a child process.

Used by tests/engines/test_server_runner.py, tests/study/run/test_launch_beside.py,
tests/study/run/test_racing.py and tests/fake_endpoint.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
from PIL import Image
from small_space import REPO

from autotune.export import Export
from autotune.records import Prompt
from autotune.space import SearchSpace, Workload, load_space

FAKE = str(Path(__file__).with_name("fake_openai_server.py"))


def space(**workload: float) -> SearchSpace:
    base = load_space("smoke")
    values = {
        "warmup_requests": 1,
        "requests": 3,  # passes of 3: six requests, two passes
        "max_requests": 6,  # a fixed count: these tests are about the runner, not convergence
        "startup_timeout_s": 20.0,
        **workload,
    }
    return base.model_copy(
        update={
            "workload": Workload.model_validate(values),
            "trial_timeout_s": 30.0,
            "device": "cpu",
        }
    )


PROMPTS = [
    Prompt(f"item-{i}", Image.new("RGB", (64 + 16 * i, 48), (i * 40, 90, 200)), "Say hi.")
    for i in range(3)
]


def fake(token: str, *extra: str, fmt: str = "swift") -> Callable[[int], Export]:
    """A render function that starts the fake server; `token` marks its processes."""

    def render(port: int) -> Export:
        argv = [sys.executable, FAKE, "--port", str(port), "--model", token, *extra]
        return Export(format=fmt, argv=argv, request={"max_tokens": 8, "temperature": 0})

    return render


def leftovers(token: str) -> list[str]:
    """Command lines of live processes that carry `token` (ours, or a leak)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if token in cmdline and proc.pid != os.getpid():
            found.append(cmdline)
    return found


def token() -> str:
    return f"autotune-test-{uuid.uuid4().hex[:10]}"


def wait_answering(port: int, model: str) -> None:
    """Until the server on `port` serves `model` (connecting only: binding would race it)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            reply = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1, trust_env=False)
            if reply.json()["data"][0]["id"] == model:
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"nothing serves {model} on port {port}")


def autotune(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
