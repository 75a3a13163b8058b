"""Bad input: one clear line, a non-zero exit, no traceback, and no study database written."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from small_space import autotune_cli

import autotune.evaluate
import autotune.study.plan
from autotune.cli import main
from autotune.client.chat import normalize_base_url
from autotune.errors import TrialFailure
from autotune.evaluate import configured, parse_overrides
from autotune.params import TrialConfig

REPO = Path(__file__).resolve().parents[2]


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return autotune_cli(*args, cwd=cwd, timeout=120)


def assert_one_line_error(
    result: subprocess.CompletedProcess[str], *needles: str, code: int = 2
) -> None:
    assert result.returncode == code, result.stderr
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


# --- in-process: one `error:` line for every mistake, and nothing written ------------------


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=True)


def assert_one_line(result: Result, *needles: str, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


def nothing_written(folder: Path) -> bool:
    return not any(folder.iterdir())


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_click_usage_errors_are_one_line_too(in_tmp: Path) -> None:
    assert_one_line(invoke("run", "--space", "smoke", "--trials", "0"), "--trials")
    assert_one_line(invoke("run", "--bogus"), "No such option")
    assert_one_line(invoke("runn"), "Did you mean 'run'")
    assert nothing_written(in_tmp)


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--space", "smoke", "--timeout", "nan"),
        ("run", "--space", "smoke", "--timeout", "inf"),
        ("verify", "--tolerance", "nan"),
        ("verify", "--tolerance", "-inf"),
    ],
)
def test_float_options_refuse_nan_and_infinities(in_tmp: Path, args: tuple[str, ...]) -> None:
    assert_one_line(invoke(*args), "is not a finite number")
    assert nothing_written(in_tmp)


@pytest.mark.parametrize("name", ["../up", "a/b", "a\nb", "-x", ".hidden", "", "x" * 129])
@pytest.mark.parametrize(
    "command",
    [
        ["run", "--space", "smoke"],
        ["best"],
        ["export"],
        ["verify"],
        ["dashboard"],
        ["report", "--out", "r.html"],
    ],
)
def test_study_names_that_are_no_safe_file_name_are_refused(
    in_tmp: Path, command: list[str], name: str
) -> None:
    line = assert_one_line(invoke(*command, "--study", name), "--study", "letters, digits")
    assert "\\n" in line or "\n" not in name  # a newline is shown escaped, never printed
    assert nothing_written(in_tmp)


def test_a_space_named_empty_writes_no_database(in_tmp: Path) -> None:
    data = yaml.safe_load((REPO / "search_spaces" / "smoke.yaml").read_text())
    data.update(name="", model=str(REPO / "models" / "tiny-qwen3-vl"))
    (in_tmp / "inputs").mkdir()
    space = in_tmp / "inputs" / "s.yaml"
    space.write_text(yaml.safe_dump(data))
    assert_one_line(invoke("run", "--space", str(space)), "name: '' is not a valid name")
    assert [p.name for p in in_tmp.iterdir()] == ["inputs"]


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("ftp://127.0.0.1:8000", "is not an http:// or https:// URL"),
        ("http://", "names no host"),
        ("http://127.0.0.1:99999", "no valid port"),
        ("CLOSED", "did not answer GET /v1/models"),
    ],
)
@pytest.mark.parametrize("command", ["run", "eval"])
def test_bad_or_closed_endpoints_are_refused_before_any_study(
    in_tmp: Path, command: str, endpoint: str, expected: str
) -> None:
    endpoint = endpoint.replace("CLOSED", f"http://127.0.0.1:{closed_port()}")
    line = assert_one_line(invoke(command, "--space", "smoke", "--endpoint", endpoint), expected)
    assert "http://ftp://" not in line
    assert nothing_written(in_tmp)


def test_endpoint_urls_are_normalised_or_refused() -> None:
    for url in ("http://h:8000", "h:8000", "http://h:8000/v1/", "https://h:8000/"):
        assert normalize_base_url(url).endswith("h:8000")
    assert normalize_base_url("HTTPS://h/v1") == "HTTPS://h"
    for url in ("ftp://127.0.0.1", "http://", "", "http://:80", "http://h:0", "a b"):
        with pytest.raises(ValueError):
            normalize_base_url(url)


def test_device_cuda_without_a_gpu_is_refused_before_any_study(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autotune.study.plan, "gpu_count", lambda: 0)
    data = yaml.safe_load((REPO / "search_spaces" / "smoke.yaml").read_text())
    data.update(device="cuda", model=str(REPO / "models" / "tiny-qwen3-vl"))
    space = in_tmp / "cuda.yaml"
    space.write_text(yaml.safe_dump(data))
    assert_one_line(invoke("run", "--space", str(space)), "device: cuda", "no NVIDIA GPU")
    assert [p.name for p in in_tmp.iterdir()] == ["cuda.yaml"]


def test_gpu_count_is_zero_when_nvml_cannot_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    def broken() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    assert autotune.study.plan.gpu_count() == 0
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 2)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    assert autotune.study.plan.gpu_count() == 2


def test_eval_param_the_backend_lacks_is_refused(in_tmp: Path) -> None:
    line = assert_one_line(
        invoke(
            "eval",
            "--space",
            "smoke",
            "--param",
            "backend=transformers",
            "--param",
            "kv_cache_fraction=0.5",
        ),
        "the transformers backend has no kv_cache_fraction",
    )
    assert "lmdeploy, vllm" in line
    assert nothing_written(in_tmp)


def test_eval_param_accepts_the_seed_and_checks_its_range() -> None:
    assert configured(TrialConfig(), parse_overrides(["seed=7"])).seed == 7
    result = invoke("eval", "--space", "smoke", "--param", "seed=4294967296")
    assert_one_line(result, "--param seed", "less than or equal to 4294967295")


def test_eval_param_backend_switch_drops_what_the_new_backend_lacks() -> None:
    reference = TrialConfig(backend="lmdeploy", kv_cache_fraction=0.7, max_batch_size=8)
    config = configured(reference, parse_overrides(["backend=transformers"]))
    assert config.kv_cache_fraction is None and config.max_batch_size is None


def test_eval_reports_a_trial_failure_in_one_line(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: Any, **kwargs: Any) -> None:
        raise TrialFailure("flash-attn is not installed\nsecond line", kind="error")

    monkeypatch.setattr(autotune.evaluate, "measure_once", fail)
    assert_one_line(
        invoke("eval", "--space", "smoke"),
        "error: the configuration could not be measured: error: flash-attn is not installed",
        code=1,
    )


def test_export_of_an_infeasible_trial_says_so(small_study: tuple[str, str]) -> None:
    storage, name = small_study
    result = invoke("export", "--storage", storage, "--study", name, "--trial", "3")
    assert result.exit_code == 0, result.output
    assert "# note: trial 3 is infeasible: accuracy" in result.stdout
    strict = invoke("export", "--storage", storage, "--study", name, "--trial", "3", "--strict")
    assert_one_line(strict, "trial 3 cannot be expressed exactly", "infeasible")
    feasible = invoke("export", "--storage", storage, "--study", name, "--trial", "1")
    assert "infeasible" not in feasible.stdout


# --- the real command line, for what only a real process shows ----------------------------


def test_a_deeply_nested_space_is_one_line_in_a_real_process(workdir: Path) -> None:
    space = workdir / "deep.yaml"
    space.write_text("[" * 20000)
    result = run_cli(["run", "--space", str(space)], workdir)
    assert_one_line_error(result, "too deeply nested")
    assert [p.name for p in workdir.iterdir()] == ["deep.yaml"]


def test_eval_of_an_engine_that_is_not_installed_fails_in_one_line(workdir: Path) -> None:
    """Refused before anything starts, with what to install (as a study drops it)."""
    result = run_cli(["eval", "--space", "smoke", "--param", "backend=vllm"], workdir)
    assert_one_line_error(result, "backend vllm is not installed", "pip install")
    assert not list(workdir.iterdir())


def test_a_busy_timeout_that_is_not_a_number_is_one_line_and_writes_nothing(
    workdir: Path,
) -> None:
    env = {**os.environ, "AUTOTUNE_SQLITE_BUSY_TIMEOUT_S": "soon"}
    result = autotune_cli("run", "--space", "smoke", "--trials", "1", cwd=workdir, env=env)
    assert_one_line_error(result, "AUTOTUNE_SQLITE_BUSY_TIMEOUT_S='soon'", "unset it")
    assert no_database_written(workdir)


@pytest.mark.slow
def test_a_kernel_that_is_not_installed_is_named_with_what_to_install(workdir: Path) -> None:
    """It said only "server exited with status 1" once the smoke space measured through swift
    deploy (2725f45); the message names FlashAttention-2 and the package again."""
    result = run_cli(
        ["eval", "--space", "smoke", "--param", "attn_implementation=flash_attention_2"], workdir
    )
    assert_one_line_error(result, "flash_attention_2", "flash-attn", "pip install")
