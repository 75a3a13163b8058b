"""An in-process trial's `swift deploy` export answers as the trial did, item by item.

This is the condition under which autotune counts an in-process transformers trial as
deployable through ms-swift (autotune.export.reproduce): a real smoke study runs in-process,
then the command `autotune export` prints is launched as printed (only host and port
changed) and queried with the official `openai` client, sending the request fields and the
client-side resize the export's notes ask for.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shlex
import socket
import subprocess
import time
from pathlib import Path

import httpx
import optuna
import pytest
from optuna.trial import TrialState
from small_space import autotune_cli, small_space

from autotune.engines.server_process import resolve_program
from autotune.evalset.dataset import load_evalset
from autotune.evalset.images import resize_to_max_side

openai = pytest.importorskip("openai")
pytestmark = [pytest.mark.slow, pytest.mark.swift]

SMOKE = Path(__file__).resolve().parent.parent / "evalsets" / "smoke"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch(command: str, port: int, log: Path) -> subprocess.Popen[bytes]:
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


def _wait_ready(port: int, server: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert server.poll() is None, log.read_text()[-3000:]
        try:
            models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).json()
            return str(models["data"][0]["id"])
        except (httpx.HTTPError, ValueError, KeyError):
            time.sleep(0.5)
    raise AssertionError("swift deploy never answered:\n" + log.read_text()[-3000:])


def _data_url(image: object, side: int | None) -> str:
    buffer = io.BytesIO()
    resize_to_max_side(image, side).save(buffer, format="PNG")  # type: ignore[arg-type]
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.fixture(scope="module")
def reproduce_study(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, list[optuna.trial.FrozenTrial]], dict[int, dict[str, object]]]:
    """A smoke study in-process, and each trial's export: (folder, trials by command,
    exports by trial number)."""
    tmp_path = tmp_path_factory.mktemp("reproduce")
    space = small_space(
        tmp_path,
        name="reproduce",
        evalset=str(SMOKE),
        trials=4,
        params={
            "image_max_side": {"choices": [None, 128, 64]},
            "batch_size": {"choices": [1, 4]},
        },
        sampler={"n_startup_trials": 4},
    )
    db = tmp_path / "reproduce.db"
    storage = f"sqlite:///{db}"
    ran = autotune_cli(
        "run", "--space", str(space), "--study", "reproduce", "--storage", storage, cwd=tmp_path
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    study = optuna.load_study(study_name="reproduce", storage=storage)
    trials = [
        t
        for t in study.get_trials(states=(TrialState.COMPLETE,))
        if "duplicate_of" not in t.user_attrs
    ]
    sides = {t.user_attrs["config"]["image_max_side"] for t in trials}
    assert len(sides) >= 2, sides  # more than one image size, so resizing is exercised

    exports = {}
    for trial in trials:
        assert trial.user_attrs["deployable"] is True, trial.user_attrs["deployability"]
        out = autotune_cli(
            "export", "--study", "reproduce", "--storage", storage,
            "--trial", str(trial.number), "--json", cwd=tmp_path,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        exports[trial.number] = json.loads(out.stdout)
    # The static batch of an in-process trial becomes the server's --max_batch_size; the
    # image size and the decoding are request-time, so trials share a command otherwise.
    by_command: dict[str, list[optuna.trial.FrozenTrial]] = {}
    for trial in trials:
        by_command.setdefault(exports[trial.number]["command"], []).append(trial)
    return tmp_path, by_command, exports


@pytest.mark.parametrize("batch_size", [1, 4])
def test_swift_export_of_in_process_trials_gives_the_same_answers(
    reproduce_study: tuple[
        Path, dict[str, list[optuna.trial.FrozenTrial]], dict[int, dict[str, object]]
    ],
    batch_size: int,
) -> None:
    """One `swift deploy` per static batch (its --max_batch_size), launched as exported."""
    tmp_path, by_command, exports = reproduce_study
    served = {
        command: group
        for command, group in by_command.items()
        if group[0].user_attrs["config"]["batch_size"] == batch_size
    }
    assert len(served) == 1, list(by_command)  # the seeded study measures both batches
    command, group = next(iter(served.items()))
    assert "IMAGE_MIN_TOKEN_NUM=64" in command
    _check_answers(command, group, exports, load_evalset(str(SMOKE)), tmp_path)


def _check_answers(
    command: str,
    trials: list[optuna.trial.FrozenTrial],
    exports: dict[int, dict[str, object]],
    evalset: object,
    tmp_path: Path,
) -> None:
    port = _free_port()
    log = tmp_path / f"swift-{port}.log"
    server = _launch(command, port, log)
    try:
        model = _wait_ready(port, server, log)
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
            for item in evalset.items:  # type: ignore[attr-defined]
                reply = client.chat.completions.create(
                    model=model,
                    messages=[
                        {
                            "role": "user",
                            "content": [
                                {
                                    "type": "image_url",
                                    "image_url": {"url": _data_url(item.load_image(), side)},
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
            assert len(recorded) == len(evalset.items)  # type: ignore[attr-defined]
    finally:
        os.killpg(server.pid, 9)
        server.wait(timeout=30)
