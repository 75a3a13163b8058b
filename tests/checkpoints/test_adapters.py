"""LoRA adapters (--adapter NAME=PATH): measured through a real `swift deploy`, exported with
the adapter, verified by relaunching that command; checked up front with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from small_space import REPO, autotune_cli, quick_space

from autotune.checkpoints.adapters import parse_adapters
from autotune.errors import ModelError
from autotune.export import render_export
from autotune.params import TrialConfig
from tools.make_test_lora import make_lora

MODEL = "Qwen/Qwen3-VL-2B-Instruct"


@pytest.fixture(scope="module")
def lora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_lora(tmp_path_factory.mktemp("lora") / "ocr")


def test_every_target_carries_the_adapter_or_says_it_cannot(lora: Path) -> None:
    adapters = parse_adapters([f"ocr={lora}"])
    assert adapters[0].rank == 8
    swift = render_export(TrialConfig(), fmt="swift", model=MODEL, adapters=adapters)
    assert swift.argv[swift.argv.index("--adapters") + 1] == f"ocr={lora.resolve()}"
    assert swift.exact and any('"model": "ocr"' in note for note in swift.notes)
    vllm = render_export(TrialConfig(backend="vllm"), fmt="vllm", model=MODEL, adapters=adapters)
    assert "--enable-lora" in vllm.argv
    assert vllm.argv[vllm.argv.index("--lora-modules") + 1] == f"ocr={lora.resolve()}"
    assert vllm.argv[vllm.argv.index("--max-lora-rank") + 1] == "8"
    lmdeploy = render_export(
        TrialConfig(backend="lmdeploy"), fmt="lmdeploy", model=MODEL, adapters=adapters
    )
    assert not lmdeploy.exact  # --strict refuses it
    assert any("lmdeploy#4162" in note for note in lmdeploy.notes)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("ocr", "write it as NAME=PATH"),
        ("-x=/tmp", "a name is 1-64 letters"),
        ("ocr=/nonexistent/lora", "no such folder"),
        ("ocr={model}", "no adapter_config.json"),
    ],
)
def test_a_bad_adapter_is_one_line(spec: str, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        parse_adapters([spec.format(model=REPO / "models" / "tiny-qwen3-vl")])


def test_a_space_that_deploys_with_lmdeploy_refuses_an_adapter(lora: Path, tmp_path: Path) -> None:
    ran = autotune_cli(
        "run", "--space", "default", "--adapter", f"ocr={lora}", "--dummy-weights", cwd=tmp_path
    )
    assert ran.returncode != 0 and "Traceback" not in ran.stderr
    assert "deploys with lmdeploy" in ran.stderr and "lmdeploy#4162" in ran.stderr
    assert not (tmp_path / "studies").exists()  # nothing written


@pytest.fixture(scope="module")
def lora_study(lora: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A two-trial smoke-swift study through `swift deploy` with the adapter: (folder, storage,
    space file).

    The smoke-swift space with its load capped at 3 s after 2 s of settling (instead of 10 s
    and 5 s): these tests check what the adapter changes (the answers, the command, verify's
    accuracy), not the speed figures. `autotune eval` measures a load too, so it gets the
    same space.
    """
    folder = tmp_path_factory.mktemp("lora-study")
    space = quick_space("smoke-swift", folder, max_measure_s=3, max_warmup_s=2)
    storage = f"sqlite:///{folder}/lora.db"
    run = autotune_cli(
        "run", "--space", str(space), "--trials", "2", "--study", "lora",
        "--storage", storage, "--adapter", f"ocr={lora}", cwd=folder,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return folder, storage, space


@pytest.mark.slow
@pytest.mark.swift
def test_a_lora_study_through_swift_deploy_answers_with_the_adapter(
    lora: Path, lora_study: tuple[Path, str, Path]
) -> None:
    tmp_path, storage, space = lora_study
    adapter = f"ocr={lora}"
    study = optuna.load_study(study_name="lora", storage=storage)
    assert study.user_attrs["adapters"][0]["name"] == "ocr"
    reference = study.trials[0]
    # The requests named the adapter, and swift deploy answered with it applied: the same
    # answers as the in-process engine with the adapter, unlike the base model's.
    assert reference.user_attrs["environment"]["served_model"] == "ocr"
    assert "--adapters" in reference.user_attrs["environment"]["server_command"]
    evals = {}
    for name, extra in (("adapted", ["--adapter", adapter]), ("base", [])):
        ran = autotune_cli(
            "eval", "--space", str(space), "--param", "backend=transformers", "--json",
            *extra, cwd=tmp_path,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr[-3000:]
        evals[name] = json.loads(ran.stdout)["predictions"]
    # The reference answers a stage at a time: compare the items it answered.
    served = reference.user_attrs["predictions"]
    assert served and served == {i: evals["adapted"][i] for i in served}
    # The test adapter nudges a trained reader: it changes some answers, not most (9 of 80).
    assert sum(served[i] != evals["base"][i] for i in served) >= max(1, len(served) // 20)


@pytest.mark.slow
@pytest.mark.swift
def test_the_lora_study_exports_the_adapter(lora: Path, lora_study: tuple[Path, str, Path]) -> None:
    tmp_path, storage, _ = lora_study
    export = autotune_cli("export", "--study", "lora", "--storage", storage, "--json", cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    command = json.loads(export.stdout)
    assert command["argv"][command["argv"].index("--adapters") + 1] == f"ocr={lora.resolve()}"
    assert command["exact"] is True


@pytest.mark.slow
@pytest.mark.swift
def test_the_lora_study_verifies_by_relaunching_with_the_adapter(
    lora_study: tuple[Path, str, Path],
) -> None:
    tmp_path, storage, _ = lora_study
    verify = autotune_cli(
        "verify", "--study", "lora", "--storage", storage, "--json", "--tolerance", "1.0",
        cwd=tmp_path,
    )  # fmt: skip
    report = json.loads(verify.stdout)
    assert report["failure"] is None, (report["failure"], verify.stderr[-3000:])
    assert "--adapters" in report["command"]
    # The adapted model answers as the trial did. Its speed is another matter on a machine
    # busy with other work: latency may double, so the exit status follows the speed checks.
    accuracy = next(c for c in report["checks"] if c["metric"] == "accuracy")
    assert accuracy["passed"] is True
    assert verify.returncode == (0 if report["passed"] else 1)
