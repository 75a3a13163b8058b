"""bench/cpu/reference_pass.py on the bundled tiny model: every batch size asked for is timed,
each answer holds its forced length, and the per-batch split accounts for the pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "cpu" / "reference_pass.py"

pytestmark = pytest.mark.slow


def test_each_batch_is_timed_and_split() -> None:
    args = ["--items", "12", "--batch", "4,8", "--repeats", "1", "--device", "cpu", "--per-batch"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["items"] == 12 and set(result["batches"]) == {"4", "8"}
    for size, figures in result["batches"].items():
        [run] = figures["runs"]
        assert run["answer_tokens"] == result["answer_tokens"] > 12  # every length + 1 (end)
        assert run["batches"] == len(run["per_batch"]) == -(-12 // int(size))
        assert run["per_batch"][0]["rows"] == int(size)
        # Prepared ahead: a batch's own generate call prepares nothing.
        assert all(entry["prepare_s"] < 0.05 for entry in run["per_batch"])
        parts = run["generate_s"] + run["replies_s"] + run["prepare_wait_s"]
        assert parts == pytest.approx(run["wall_s"], rel=0.05)
        assert run["prepare_wait_s"] >= 0 and run["generate_s"] > 0


def test_a_folder_without_a_checkpoint_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(REPO / "docs")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip().splitlines()[-1].endswith("is no checkpoint folder (no tokenizer.json)")
    )
