"""Quantisation and caches as searched launch parameters: only what each engine supports for
Qwen3-VL is proposed, the rest is listed once with its reason, and exports say it in flags."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from small_space import autotune_cli, small_space

from autotune.errors import ExportError
from autotune.export import render_export
from autotune.params import TrialConfig
from autotune.space import SearchSpace
from autotune.space.sampling import suggest, unsupported_notes
from autotune.space.support import unsupported_reason

MODEL = "Qwen/Qwen3-VL-2B-Instruct"


def gpu_space(**extra: object) -> SearchSpace:
    return SearchSpace.model_validate(
        {
            "name": "quant",
            "model": MODEL,
            "device": "cuda",
            "deploy": "vllm",
            "reference": {"backend": "transformers", "dtype": "bfloat16"},
            "params": {
                "backend": {"choices": ["transformers", "lmdeploy", "vllm"]},
                "weight_quant": {"choices": ["none", "fp8"]},
                "kv_quant": {"choices": ["none", "int8", "fp8"]},
                "prefix_cache": {"choices": [False, True]},
                "batch_size": {"choices": [1, 8]},
            },
            **extra,
        }
    )


def test_unsupported_combinations_are_never_proposed() -> None:
    space = gpu_space()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen: dict[str, set[object]] = {}
    for _ in range(300):
        trial = study.ask()
        config = suggest(space, trial)
        study.tell(trial, 0.0)
        values = config.model_dump()
        for name in ("weight_quant", "kv_quant", "prefix_cache"):
            assert unsupported_reason(config.backend, name, values[name], device="cuda") is None
        seen.setdefault(config.backend, set()).add(config.kv_quant)
        if config.backend == "vllm":
            # vLLM serves none and fp8 of the three: searched under its own Optuna name.
            assert "kv_quant@vllm" in trial.params and "kv_quant" not in trial.params
    assert seen == {"transformers": {"none"}, "lmdeploy": {"none"}, "vllm": {"none", "fp8"}}


def test_each_unsupported_combination_is_listed_once_with_its_reason() -> None:
    notes = unsupported_notes(gpu_space())
    assert len(notes) == len(set(notes))
    assert (
        "not proposed: kv_quant int8 on lmdeploy: LMDeploy 0.18's supported-models table "
        "marks KV int8 'No' for Qwen3-VL" in notes
    )
    assert any(n.startswith("not proposed: kv_quant int8 on vllm:") for n in notes)
    assert any(n.startswith("not proposed: kv_quant fp8 on transformers:") for n in notes)
    assert not any("weight_quant" in n for n in notes)  # every engine has FP8 weights on CUDA
    assert not any("kv_quant fp8 on vllm" in n for n in notes)


def test_fp8_weights_need_a_gpu_on_every_engine() -> None:
    notes = unsupported_notes(gpu_space(device="cpu"))
    assert "not proposed: weight_quant fp8 on transformers: transformers' FineGrainedFP8Config " \
        "runs on CUDA GPUs only" in notes  # fmt: skip


def test_a_reference_or_candidate_the_engine_cannot_serve_is_refused() -> None:
    with pytest.raises(ValueError, match="reference: kv_quant int8 on lmdeploy: LMDeploy 0.18"):
        gpu_space(reference={"backend": "lmdeploy", "kv_quant": "int8"})
    with pytest.raises(ValueError, match=r"candidates\[0\].config: weight_quant fp8 on swift"):
        gpu_space(candidates=[{"name": "x", "config": {"backend": "swift", "weight_quant": "fp8"}}])


def test_lmdeploy_fp8_serves_the_block_fp8_checkpoint() -> None:
    config = TrialConfig(backend="lmdeploy", weight_quant="fp8", prefix_cache=True)
    export = render_export(
        config, fmt="lmdeploy", model=MODEL, quantized_models={"fp8": f"{MODEL}-FP8"}
    )
    assert export.argv[3] == f"{MODEL}-FP8"
    assert "--enable-prefix-caching" in export.argv and export.exact
    with pytest.raises(ExportError, match="quantized_checkpoints"):
        render_export(config, fmt="lmdeploy", model=MODEL)


def test_vllm_flags_for_quantisation_and_caches() -> None:
    plain = render_export(TrialConfig(backend="vllm"), fmt="vllm", model=MODEL).argv
    # vLLM caches by default: a trial without caches must say so in its command.
    assert "--no-enable-prefix-caching" in plain
    assert plain[plain.index("--mm-processor-cache-gb") + 1] == "0"
    config = TrialConfig(backend="vllm", weight_quant="fp8", kv_quant="fp8", prefix_cache=True)
    argv = render_export(config, fmt="vllm", model=MODEL).argv
    assert argv[argv.index("--quantization") + 1] == "fp8"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8"
    assert "--enable-prefix-caching" in argv and "--mm-processor-cache-gb" not in argv


def test_in_process_what_ifs_are_not_exact_for_swift() -> None:
    for config in (
        TrialConfig(weight_quant="fp8"),
        TrialConfig(prefix_cache=True),
    ):
        export = render_export(config, fmt="swift", model=MODEL)
        assert not export.exact
        assert any("no such cache" in n or "quantises on load" in n for n in export.notes)


@pytest.mark.slow
def test_a_study_reports_an_unsupported_quantisation_and_never_proposes_it(
    tmp_path: Path,
) -> None:
    params = {
        "kv_quant": {"choices": ["none", "int8"]},
        "image_max_side": {"choices": [None, 128]},
    }
    space = small_space(tmp_path, name="kvq", trials=3, params=params)
    storage = f"sqlite:///{tmp_path}/kvq.db"
    ran = autotune_cli("run", "--space", str(space), "--storage", storage, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    reason = (
        "not proposed: kv_quant int8 on transformers: transformers' quantised KV caches need "
        "optimum-quanto or HQQ, and no deploy target serves them"
    )
    assert ran.stderr.count(reason) == 1, ran.stderr[-3000:]
    study = optuna.load_study(study_name="kvq", storage=storage)
    assert reason in study.user_attrs["notes"]
    assert all(t.user_attrs["config"]["kv_quant"] == "none" for t in study.trials)
    assert not any("kv_quant" in key for t in study.trials for key in t.params)


def test_eval_refuses_an_unsupported_quantisation_in_one_line(tmp_path: Path) -> None:
    ran = autotune_cli(
        "eval", "--space", "smoke", "--param", "backend=transformers", "--param", "kv_quant=int8",
        cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode != 0
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in ran.stderr
    assert "kv_quant int8 on transformers" in lines[0], lines
