"""Launch an exported `swift deploy` command as printed and replay a trial's items against it.

What "deployable through ms-swift" means for an in-process trial (autotune.export.reproduce):
the command `autotune export` prints, launched with only host and port changed and queried
with the official `openai` client (the request fields and client-side resize the export's
notes ask for), gives the answers the trial recorded, item by item.
"""

from __future__ import annotations

import base64
import io
import os
import shlex
import socket
import subprocess
import time
from pathlib import Path

import httpx
import openai
import optuna

from autotune.engines.server_process import resolve_program
from autotune.evalset.images import resize_to_max_side


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(command: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    """The printed command, with only --host and --port changed."""
    words = shlex.split(command)
    env = dict(os.environ)
    while "=" in words[0]:  # the KEY=value prefix, as a shell would apply it
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    host = words.index("--host")
    words[host + 1] = "127.0.0.1"
    words += ["--port", str(port)]
    # `swift` of this environment, as a user's PATH would give it.
    return subprocess.Popen(
        resolve_program(words),
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_ready(port: int, server: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()[-3000:]
        try:
            models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).json()
            return str(models["data"][0]["id"])
        except (httpx.HTTPError, ValueError, KeyError):
            time.sleep(0.5)
    raise AssertionError("swift deploy never answered:\n" + log.read_text()[-3000:])


def data_url(image: object, side: int | None) -> str:
    buffer = io.BytesIO()
    resize_to_max_side(image, side).save(buffer, format="PNG")  # type: ignore[arg-type]
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def check_answers(
    command: str,
    trials: list[optuna.trial.FrozenTrial],
    exports: dict[int, dict[str, object]],
    evalset: object,
    tmp_path: Path,
) -> None:
    port = free_port()
    log = tmp_path / f"swift-{port}.log"
    server = launch(command, port, log)
    try:
        model = wait_ready(port, server, log)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
        for trial in trials:
            export = exports[trial.number]
            notes = export["notes"]
            assert not any("what-if" in note for note in notes), notes  # type: ignore[union-attr]
            # An infeasible trial (the accuracy floor) is still reproduced by its command;
            # its export is only marked not exact so that --strict refuses to deploy it.
            infeasible = any("is infeasible" in note for note in notes)  # type: ignore[union-attr]
            assert export["exact"] is (not infeasible), notes
            side = trial.user_attrs["config"]["image_max_side"]
            fields = dict(exports[trial.number]["request"])  # type: ignore[arg-type]
            max_tokens = fields.pop("max_tokens")
            temperature = fields.pop("temperature")
            recorded = trial.user_attrs["predictions"]
            mismatched = []
            # The items the trial answered: the sequential floor stops once it has decided.
            answered = [i for i in evalset.items if i.id in recorded]  # type: ignore[attr-defined]
            assert answered, f"trial {trial.number} recorded no answers"
            for item in answered:
                reply = client.chat.completions.create(
                    model=model,
                    messages=[
                        {
                            "role": "user",
                            "content": [
                                {
                                    "type": "image_url",
                                    "image_url": {"url": data_url(item.load_image(), side)},
                                },
                                {"type": "text", "text": item.prompt},
                            ],
                        }
                    ],
                    max_tokens=max_tokens,
                    temperature=temperature,
                    extra_body=fields,
                )
                answer = (reply.choices[0].message.content or "").strip()
                if answer != recorded[item.id]:
                    mismatched.append((item.id, recorded[item.id], answer))
            assert not mismatched, f"trial {trial.number} (side {side}): {mismatched}"
    finally:
        os.killpg(server.pid, 9)
        server.wait(timeout=30)
