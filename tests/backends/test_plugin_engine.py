"""A fifth engine is one module and one registry line: a toy engine, installed as a plugin
(tests/plugins/toy_engine.py and an `autotune.backends` entry point), runs a whole study end to
end, exports its command and verifies it, with no change to autotune itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from small_space import MODEL, autotune_cli, small_evalset

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


def install_plugin(site: Path, *entry_points: str) -> dict[str, str]:
    """An environment in which `entry_points` ("name = module:object") are registered under
    autotune.backends, as `pip install` of a package declaring them would leave it."""
    dist = site / "autotune_toy-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: autotune-toy\nVersion: 0.1\n")
    lines = "\n".join(entry_points)
    (dist / "entry_points.txt").write_text(f"[autotune.backends]\n{lines}\n", encoding="utf-8")
    path = os.pathsep.join([str(site), str(PLUGINS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


def toy_space(tmp_path: Path) -> Path:
    space = {
        "name": "toy",
        "model": str(MODEL),
        "device": "cpu",
        "deploy": "toy",
        "evalset": str(small_evalset(tmp_path, n_text=4, n_shapes=2)),
        "trials": 4,
        "trial_timeout_s": 60,
        "workload": {"warmup_requests": 1, "requests": 4, "max_measure_s": 2, "max_warmup_s": 1},
        "screening": {"items": 0},
        # Six items can only pass answers that are the reference's word for word.
        "constraints": {"accuracy": {"identical_answers_only": True}},
        "reference": {
            "backend": "toy",
            "dtype": "float32",
            "image_max_side": None,
            "batch_size": 1,
            "max_batch_size": 4,
            "max_new_tokens": 16,
        },
        "params": {"batch_size": {"choices": [1, 2, 4]}, "image_max_side": {"choices": [None, 64]}},
    }
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_toy_engine_from_a_plugin_runs_a_study_exports_and_verifies(tmp_path: Path) -> None:
    env = install_plugin(tmp_path / "site", "toy = toy_engine:BACKEND")
    storage = f"sqlite:///{tmp_path}/toy.db"
    ran = autotune_cli(
        "run", "--space", str(toy_space(tmp_path)), "--storage", storage, cwd=tmp_path, env=env
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    trials = optuna.load_study(study_name="toy", storage=storage).trials
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    # A trial racing stops (its interval below the best's: how soon depends on the machine's
    # load) is PRUNED with its partial figures and the reason; it still ran on the plugin.
    raced = [
        t
        for t in trials
        if t.state == optuna.trial.TrialState.PRUNED and "raced_reason" in t.user_attrs
    ]
    # Four measured trials; a proposal that repeats one is recorded as its twin, uncounted.
    states = [(t.state.name, t.user_attrs.get("failure_reason")) for t in trials]
    assert len(complete) + len(raced) == len(trials) >= 4, states
    assert len(complete) >= 2, states  # the reference and at least one trial to recommend
    for trial in complete + raced:
        assert trial.user_attrs["config"]["backend"] == "toy"
        assert trial.user_attrs["environment"]["server_format"] == "toy"
        assert trial.user_attrs["throughput_output_tokens_per_s"] > 0
    assert {t.user_attrs["config"]["batch_size"] for t in complete + raced} > {1}

    exported = autotune_cli(
        "export", "--study", "toy", "--storage", storage, "--format", "toy", cwd=tmp_path, env=env
    )
    assert exported.returncode == 0, exported.stderr
    assert "fake_openai_server.py --port 8000 --model toy" in exported.stdout
    best = autotune_cli("best", "--study", "toy", "--storage", storage, cwd=tmp_path, env=env)
    assert "deployable with python fake_openai_server.py" in best.stdout, best.stdout
    assert "autotune export --study toy --format toy" in best.stdout
    # --tolerance 1.0: this is about the plugin's path through verify, not this machine's load
    # (beside two CPU hogs a relaunch's p95 landed 27% above the recorded one).
    verified = autotune_cli(
        "verify", "--study", "toy", "--storage", storage, "--tolerance", "1.0",
        cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    # Without the plugin the study's engine is unknown here, and autotune says so in one line.
    plain = autotune_cli("best", "--study", "toy", "--storage", storage, cwd=tmp_path)
    assert plain.returncode != 0 and len(plain.stderr.strip().splitlines()) == 1, plain.stderr
    assert "the engine 'toy', which is not registered here" in plain.stderr


def test_a_broken_plugin_is_skipped_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad_engine.py"
    bad.write_text("raise RuntimeError('no GPU driver')\n", encoding="utf-8")
    env = install_plugin(
        tmp_path / "site",
        "toy = toy_engine:BACKEND",
        "bad = bad_engine:BACKEND",
        "misnamed = toy_engine:BACKEND",
        "swift = toy_engine:render",
    )
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env['PYTHONPATH']}"
    shown = subprocess.run(
        [sys.executable, "-c", "from autotune.backends import BACKENDS; print(*BACKENDS)"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert shown.stdout.split() == ["transformers", "swift", "lmdeploy", "vllm", "toy"]
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == 3, shown.stderr
    assert (
        "'bad' (bad_engine:BACKEND) skipped: it does not import (RuntimeError: no GPU" in lines[0]
    )
    assert "'misnamed'" in lines[1] and "name the entry point the same" in lines[1]
    assert "'swift'" in lines[2] and "not an autotune.backends.Backend" in lines[2]
