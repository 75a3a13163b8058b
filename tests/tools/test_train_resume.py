"""Training the test model across calls: a resumed run equals an uninterrupted one.

A GPU command is limited to 10 minutes and the test model's recipe needs about 17, so
`tools/train_test_model.py` saves its state and resumes (weights, optimizer, step, log,
counters; the learning-rate schedule and the data position follow from the step). Here, on the
CPU where every operation is deterministic, three calls of one step each must give the very
weights and log of one call of three steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

ARGS = [
    "--steps", "3", "--batch-size", "2", "--device", "cpu", "--workers", "0",
    "--eval-dtypes", "", "--warmup", "1", "--clean-steps", "2", "--one-char-steps", "1",
    "--log-every", "1", "--overwrite",
]  # fmt: skip


def train(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.train_test_model", *ARGS, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_three_resumed_calls_equal_one_run(tmp_path: Path) -> None:
    whole = train("--out", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr[-3000:]

    state = tmp_path / "state"
    codes = []
    for _ in range(5):
        call = train("--out", str(tmp_path / "pieces"), "--state", str(state), "--stop-after", "0")
        codes.append(call.returncode)
        if call.returncode == 0:
            break
        assert call.returncode == 3, call.stderr[-3000:]
        assert "run the same command again to resume" in call.stdout
    assert codes == [3, 3, 0]

    a = load_file(tmp_path / "whole" / "model.safetensors")
    b = load_file(tmp_path / "pieces" / "model.safetensors")
    assert a.keys() == b.keys()
    different = [k for k in a if not (a[k] == b[k]).all()]
    assert not different, different[:5]
    log_a = json.loads((tmp_path / "whole" / "training_log.json").read_text())["train"]
    log_b = json.loads((tmp_path / "pieces" / "training_log.json").read_text())["train"]
    assert [h["loss"] for h in log_a["history"]] == [h["loss"] for h in log_b["history"]]
    assert log_b["steps"] == 3 and len(log_b["history"]) == 3


def test_resuming_with_another_schedule_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = train("--out", str(tmp_path / "m"), "--state", str(state), "--stop-after", "0")
    assert first.returncode == 3, first.stderr[-3000:]
    other = subprocess.run(
        [sys.executable, "-m", "tools.train_test_model", *ARGS, "--lr", "0.5",
         "--out", str(tmp_path / "m"), "--state", str(state)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert other.returncode != 0
    assert "resume with the same arguments" in other.stderr
