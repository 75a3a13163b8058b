"""Space files: validation errors name the file and field; suggestion honours conditions."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from autotune.errors import SpaceError
from autotune.params import PARAM_NAMES, TrialConfig
from autotune.space import builtin_spaces, load_space

BASE = {
    "model": "some/model",
    "reference": {"dtype": "float32", "max_new_tokens": 16},
    "params": {
        "dtype": {"choices": ["float32", "bfloat16"]},
        "do_sample": {"choices": [False, True]},
        "temperature": {"low": 0.2, "high": 1.0, "when": {"do_sample": [True]}},
        "image_max_side": {"choices": [None, 256]},
        "kv_cache_fraction": {"low": 0.5, "high": 0.9},
        "compile_mode": {"choices": ["none", "default"]},
        "backend": {"choices": ["transformers", "lmdeploy"]},
    },
}


def write_space(tmp_path: Path, data: dict | str, name: str = "space.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def with_params(**params: dict) -> dict:
    return {**BASE, "params": {**BASE["params"], **params}}


@pytest.mark.parametrize("name", builtin_spaces())
def test_every_builtin_space_loads(name: str) -> None:
    space = load_space(name)
    assert space.name == name
    assert space.reference_config().batch_size >= 1


def test_unknown_space_name_suggests_the_closest(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match="unknown space 'smok': did you mean 'smoke'"):
        load_space("smok")


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = write_space(tmp_path, "model: x\nparams:\n  dtype: {choices: [float32\n")
    with pytest.raises(SpaceError) as info:
        load_space(str(path))
    message = str(info.value)
    assert str(path) in message and "malformed YAML at line" in message


def test_unknown_parameter_gets_did_you_mean(tmp_path: Path) -> None:
    path = write_space(tmp_path, with_params(temprature={"low": 0.1, "high": 1.0}))
    with pytest.raises(
        SpaceError, match="params.temprature: unknown parameter; did you mean 'temperature'"
    ):
        load_space(str(path))


def test_out_of_range_value_is_rejected_with_field(tmp_path: Path) -> None:
    path = write_space(tmp_path, with_params(temperature={"low": 0.2, "high": 5.0}))
    with pytest.raises(SpaceError, match=r"params.temperature.high: 5.0 is not allowed"):
        load_space(str(path))


def test_unknown_choice_lists_allowed_values(tmp_path: Path) -> None:
    path = write_space(tmp_path, with_params(dtype={"choices": ["float32", "fp8"]}))
    with pytest.raises(SpaceError) as info:
        load_space(str(path))
    assert "params.dtype.choices[1]: 'fp8' is not allowed" in str(info.value)
    assert "bfloat16" in str(info.value)


def test_unknown_top_level_field_lists_allowed_fields(tmp_path: Path) -> None:
    path = write_space(tmp_path, {**BASE, "trails": 5})
    with pytest.raises(SpaceError, match=r"trails: unknown field \(allowed here: .*trials"):
        load_space(str(path))


def test_reference_outside_the_search_is_measured_as_given(tmp_path: Path) -> None:
    # A baseline that is no candidate (full-size images while only smaller ones are searched,
    # or an in-process reference beside server candidates).
    path = write_space(tmp_path, with_params(image_max_side={"choices": [128, 256]}))
    space = load_space(str(path))
    assert "image_max_side" not in space.reference_params()
    study = optuna.create_study()
    study.enqueue_trial(space.reference_params())
    trial = study.ask()
    config = space.suggest(trial, fixed=space.reference_config())
    assert config.image_max_side is None
    assert "image_max_side" not in trial.params
    assert space.suggest(study.ask()).image_max_side in (128, 256)


def test_condition_on_a_later_parameter_is_rejected(tmp_path: Path) -> None:
    path = write_space(
        tmp_path, with_params(dtype={"choices": ["float32"], "when": {"batch_size": [1]}})
    )
    with pytest.raises(SpaceError, match="params.dtype.when: 'batch_size' must be a parameter"):
        load_space(str(path))


def test_range_on_a_categorical_parameter_is_rejected(tmp_path: Path) -> None:
    path = write_space(tmp_path, with_params(dtype={"low": 1, "high": 2}))
    with pytest.raises(SpaceError, match="params.dtype: takes 'choices'"):
        load_space(str(path))


def test_suggest_applies_conditions(tmp_path: Path) -> None:
    space = load_space(str(write_space(tmp_path, BASE)))
    greedy = space.suggest(
        optuna.trial.FixedTrial(
            {
                "backend": "transformers",
                "dtype": "bfloat16",
                "do_sample": False,
                "image_max_side": 256,
                "compile_mode": "default",
            }
        )
    )
    assert greedy.temperature is None and greedy.kv_cache_fraction is None
    assert greedy.compile_mode == "default" and greedy.image_max_side == 256

    sampled = space.suggest(
        optuna.trial.FixedTrial(
            {
                "backend": "lmdeploy",
                "dtype": "float32",
                "do_sample": True,
                "temperature": 0.5,
                "image_max_side": None,
                "kv_cache_fraction": 0.7,
                "compile_mode": "default",
            }
        )
    )
    # compile_mode is searched for lmdeploy too (none = eager, else CUDA graphs).
    assert sampled.compile_mode == "default"
    assert sampled.temperature == 0.5 and sampled.kv_cache_fraction == 0.7


def test_reference_params_are_enqueueable(tmp_path: Path) -> None:
    space = load_space(str(write_space(tmp_path, BASE)))
    params = space.reference_params()
    assert set(params) <= set(PARAM_NAMES)
    assert "temperature" not in params  # greedy reference: sampling knobs do not apply
    study = optuna.create_study(directions=["maximize"])
    study.enqueue_trial(params)
    trial = study.ask()
    assert space.suggest(trial) == space.reference_config()


def test_trial_config_rejects_sampling_knobs_when_greedy() -> None:
    with pytest.raises(ValueError, match="temperature only apply when do_sample"):
        TrialConfig(do_sample=False, temperature=0.5)


def test_backends_not_installed_here_are_dropped_with_a_note() -> None:
    # vLLM and flash-attn are never installed on the CPU machines that run these tests.
    space, notes = load_space("default").runnable_here()
    assert "vllm" not in space.params["backend"].choices
    assert "lmdeploy" in space.params["backend"].choices  # its parser is installed for CI
    assert any("pip install 'autotune[vllm]'" in note for note in notes)


def test_a_deploy_target_nothing_here_can_serve_is_an_error(tmp_path: Path) -> None:
    data = with_params(backend={"choices": ["transformers", "vllm"]})
    data["deploy"] = "vllm"
    space = load_space(str(write_space(tmp_path, data)))
    with pytest.raises(SpaceError, match="deploy target vllm") as info:
        space.runnable_here()
    assert "pip install 'autotune[vllm]'" in str(info.value)


def test_a_reference_that_cannot_run_here_is_an_error(tmp_path: Path) -> None:
    data = with_params(backend={"choices": ["transformers", "vllm"]})
    data["reference"] = {**data["reference"], "backend": "vllm", "kv_cache_fraction": 0.7}
    space = load_space(str(write_space(tmp_path, data)))
    with pytest.raises(SpaceError, match="the reference needs backend vllm is not installed"):
        space.runnable_here()
