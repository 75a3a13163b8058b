"""Bad input: one clear line, a non-zero exit, no traceback, and no study database written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from small_space import autotune_cli

from autotune.cli import main

REPO = Path(__file__).resolve().parent.parent


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return autotune_cli(*args, cwd=cwd, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


def no_database_written(workdir: Path) -> bool:
    return not list(workdir.rglob("*.db"))


def test_unknown_space(workdir: Path) -> None:
    result = run_cli(["run", "--space", "smokee"], workdir)
    assert_one_line_error(result, "unknown space 'smokee'", "did you mean 'smoke'")
    assert no_database_written(workdir)


def test_malformed_space_file(workdir: Path) -> None:
    space = workdir / "bad.yaml"
    space.write_text("model: x\nparams: [unclosed\n")
    result = run_cli(["run", "--space", str(space)], workdir)
    assert_one_line_error(result, "bad.yaml", "malformed YAML")
    assert no_database_written(workdir)


def test_out_of_range_parameter(workdir: Path) -> None:
    text = (REPO / "search_spaces" / "smoke.yaml").read_text()
    text = text.replace("    low: 0.2\n    high: 1.0", "    low: 0.2\n    high: 9.0", 1)
    space = workdir / "smoke-bad.yaml"
    space.write_text(text.replace("../models/tiny-qwen3-vl", str(REPO / "models/tiny-qwen3-vl")))
    result = run_cli(["run", "--space", str(space)], workdir)
    assert_one_line_error(result, "params.temperature.high: 9.0 is not allowed")
    assert no_database_written(workdir)


def test_missing_model_path(workdir: Path) -> None:
    result = run_cli(["run", "--space", "smoke", "--model", "./no/such/model"], workdir)
    assert_one_line_error(result, "does not exist", "--model PATH")
    assert no_database_written(workdir)


def test_model_that_is_not_qwen3_vl(workdir: Path) -> None:
    model = workdir / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    result = run_cli(["run", "--space", "smoke", "--model", str(model)], workdir)
    assert_one_line_error(result, "'llama' model", "qwen3_vl")
    assert no_database_written(workdir)


def test_unreachable_hub_id_points_to_local_options(workdir: Path) -> None:
    result = run_cli(["run", "--space", "smoke", "--model", "Qwen/Qwen3-VL-2B-Instruct"], workdir)
    assert_one_line_error(result, "--model PATH", "--space smoke")
    assert no_database_written(workdir)


def test_unreadable_eval_image(workdir: Path) -> None:
    evalset = workdir / "mine"
    (evalset / "images").mkdir(parents=True)
    (evalset / "images" / "a.png").write_bytes(b"not a png")
    item = {
        "id": "a",
        "category": "text_line",
        "image": "images/a.png",
        "prompt": "Read it.",
        "answers": ["x"],
        "metric": "exact_match",
    }
    (evalset / "items.jsonl").write_text(json.dumps(item) + "\n")
    result = run_cli(["run", "--space", "smoke", "--evalset", str(evalset)], workdir)
    assert_one_line_error(result, "items.jsonl", "line 1")
    assert no_database_written(workdir)


def test_best_without_any_study_creates_nothing(workdir: Path) -> None:
    result = run_cli(["best", "--study", "missing"], workdir)
    assert_one_line_error(result, "no study database at studies/missing.db")
    assert no_database_written(workdir)


def test_eval_rejects_unknown_param() -> None:
    result = CliRunner().invoke(main, ["eval", "--space", "smoke", "--param", "imag_max_side=64"])
    assert result.exit_code == 2
    assert "did you mean 'image_max_side'" in result.output


def test_eval_rejects_sampling_knob_when_greedy() -> None:
    result = CliRunner().invoke(main, ["eval", "--space", "smoke", "--param", "temperature=0.5"])
    assert result.exit_code == 2
    assert "only apply when do_sample is true" in result.output


def test_help_does_not_import_torch() -> None:
    code = "import sys; from autotune.cli import main; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
