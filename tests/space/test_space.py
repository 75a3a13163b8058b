"""Space files: validation errors name the file and field; suggestion honours conditions."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from autotune.errors import SpaceError
from autotune.measure.lengths import AnswerLengths, length_bounds
from autotune.params import PARAM_NAMES, TrialConfig
from autotune.space import builtin_spaces, load_space
from autotune.space.narrowing import runnable_here
from autotune.space.sampling import reference_params, suggest

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
    assert "image_max_side" not in reference_params(space)
    study = optuna.create_study()
    study.enqueue_trial(reference_params(space))
    trial = study.ask()
    config = suggest(space, trial, fixed=space.reference_config())
    assert config.image_max_side is None
    assert "image_max_side" not in trial.params
    assert suggest(space, study.ask()).image_max_side in (128, 256)


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
    greedy = suggest(
        space,
        optuna.trial.FixedTrial(
            {
                "backend": "transformers",
                "dtype": "bfloat16",
                "do_sample": False,
                "image_max_side": 256,
                "compile_mode": "default",
            }
        ),
    )
    assert greedy.temperature is None and greedy.kv_cache_fraction is None
    assert greedy.compile_mode == "default" and greedy.image_max_side == 256

    sampled = suggest(
        space,
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
        ),
    )
    # compile_mode is searched for lmdeploy too (none = eager, else CUDA graphs).
    assert sampled.compile_mode == "default"
    assert sampled.temperature == 0.5 and sampled.kv_cache_fraction == 0.7


def test_reference_params_are_enqueueable(tmp_path: Path) -> None:
    space = load_space(str(write_space(tmp_path, BASE)))
    params = reference_params(space)
    assert set(params) <= set(PARAM_NAMES)
    assert "temperature" not in params  # greedy reference: sampling knobs do not apply
    study = optuna.create_study(directions=["maximize"])
    study.enqueue_trial(params)
    trial = study.ask()
    assert suggest(space, trial) == space.reference_config()


def test_trial_config_rejects_sampling_knobs_when_greedy() -> None:
    with pytest.raises(ValueError, match="temperature only apply when do_sample"):
        TrialConfig(do_sample=False, temperature=0.5)


def test_backends_not_installed_here_are_dropped_with_a_note() -> None:
    # vLLM and flash-attn are never installed on the CPU machines that run these tests.
    space, notes = runnable_here(load_space("default"))
    assert "vllm" not in space.params["backend"].choices
    assert "lmdeploy" in space.params["backend"].choices  # its parser is installed for CI
    assert any("pip install 'autotune[vllm]'" in note for note in notes)


def test_a_deploy_target_nothing_here_can_serve_is_an_error(tmp_path: Path) -> None:
    data = with_params(backend={"choices": ["transformers", "vllm"]})
    data["deploy"] = "vllm"
    space = load_space(str(write_space(tmp_path, data)))
    with pytest.raises(SpaceError, match="deploy target vllm") as info:
        runnable_here(space)
    assert "pip install 'autotune[vllm]'" in str(info.value)


def test_a_reference_that_cannot_run_here_is_an_error(tmp_path: Path) -> None:
    data = with_params(backend={"choices": ["transformers", "vllm"]})
    data["reference"] = {**data["reference"], "backend": "vllm", "kv_cache_fraction": 0.7}
    space = load_space(str(write_space(tmp_path, data)))
    with pytest.raises(SpaceError, match="the reference needs backend vllm is not installed"):
        runnable_here(space)


# --- values that used to fail late (in numpy, in Optuna, in a recursion) ---------------------


def space_error(tmp_path: Path, data: dict | str) -> str:
    with pytest.raises(SpaceError) as info:
        load_space(str(write_space(tmp_path, data)))
    message = str(info.value)
    assert "\n" not in message  # the CLI prints it as one line
    return message


@pytest.mark.parametrize("seed", [1180591620717411303424, 2**32, -1])
def test_the_seed_must_fit_numpys_32_bits(tmp_path: Path, seed: int) -> None:
    assert "seed:" in space_error(tmp_path, {**BASE, "seed": seed})
    assert "reference: seed:" in space_error(
        tmp_path, {**BASE, "reference": {**BASE["reference"], "seed": seed}}
    )
    load_space(str(write_space(tmp_path, {**BASE, "seed": 2**32 - 1})))
    assert TrialConfig(seed=2**32 - 1).seed == 2**32 - 1


def test_step_and_log_cannot_be_combined(tmp_path: Path) -> None:
    spec = {"low": 0.1, "high": 1.0, "step": 0.1, "log": True, "when": {"do_sample": [True]}}
    message = space_error(tmp_path, with_params(temperature=spec))
    assert "params.temperature: step and log cannot be combined" in message


@pytest.mark.parametrize(
    ("name", "spec", "expected"),
    [
        (
            "kv_cache_fraction",
            {"low": 0.0, "high": 0.9, "log": True},
            "log range needs low above 0",
        ),
        ("batch_size", {"low": 1, "high": 8, "step": 0.5}, "not a whole number"),
        ("batch_size", {"choices": [1, 2], "step": 1}, "not to 'choices'"),
        ("temperature", {"low": 0.2, "high": float("inf")}, "finite number"),
        ("temperature", {"low": float("nan"), "high": 1.0}, "finite number"),
    ],
)
def test_ranges_optuna_would_refuse_are_refused_on_load(
    tmp_path: Path, name: str, spec: dict, expected: str
) -> None:
    assert expected in space_error(tmp_path, with_params(**{name: spec}))


@pytest.mark.parametrize("text", ["[" * 20000, "{a: " * 20000, "model: " + "[" * 5000])
def test_deeply_nested_yaml_is_one_error(tmp_path: Path, text: str) -> None:
    assert "too deeply nested" in space_error(tmp_path, text)


@pytest.mark.parametrize("name", ["", "a/b", "../up", ".hidden", "-x", "a\nb", "x" * 129])
def test_a_space_name_must_be_a_safe_file_name(tmp_path: Path, name: str) -> None:
    message = space_error(tmp_path, {**BASE, "name": name})
    assert "name:" in message and "letters, digits" in message


def test_a_file_name_that_cannot_name_a_study_asks_for_a_name(tmp_path: Path) -> None:
    path = write_space(tmp_path, BASE, name="my space.yaml")
    with pytest.raises(SpaceError, match="add a name: field"):
        load_space(str(path))
    path.write_text(yaml.safe_dump({**BASE, "name": "my-space"}))
    assert load_space(str(path)).name == "my-space"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (with_params(do_sample={"choices": [False, "true"]}), "params.do_sample.choices[1]"),
        (with_params(do_sample={"choices": [0, 1]}), "params.do_sample.choices[0]"),
        (
            with_params(temperature={"low": 0.2, "high": 1.0, "when": {"do_sample": ["true"]}}),
            "params.temperature.when.do_sample",
        ),
        ({**BASE, "reference": {"do_sample": "yes"}}, "reference: do_sample"),
        (
            {**BASE, "candidates": [{"name": "a", "config": {"do_sample": "true"}}]},
            "candidates[0].config: do_sample",
        ),
    ],
)
def test_booleans_must_be_real_booleans(tmp_path: Path, data: dict, expected: str) -> None:
    assert expected in space_error(tmp_path, data)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({**BASE, "trials": True}, "trials: true is a boolean, not a number"),
        ({**BASE, "reference": {"batch_size": True}}, "batch_size: true is a boolean"),
        ({**BASE, "trial_timeout_s": float("inf")}, "trial_timeout_s: Input should be a finite"),
        ({**BASE, "workload": {"max_measure_s": float("nan")}}, "workload.max_measure_s"),
    ],
)
def test_numbers_are_finite_and_not_booleans(tmp_path: Path, data: dict, expected: str) -> None:
    assert expected in space_error(tmp_path, data)


def test_a_space_path_that_is_no_file_says_what_it_is(tmp_path: Path) -> None:
    (tmp_path / "d.yaml").mkdir()
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")  # no .yaml suffix: still a path
    expected = {
        str(tmp_path / "d.yaml"): "is a folder, not a file",
        str(tmp_path / "loop.yaml"): "is a symbolic link loop",
        str(tmp_path / "loop"): "is a symbolic link loop",
        "/dev/null": "is not a regular file",
        str(tmp_path / "missing.yaml"): "does not exist",
    }
    for path, words in expected.items():
        with pytest.raises(SpaceError) as info:
            load_space(path)
        assert words in str(info.value), path


def test_unequal_work_is_never_ranked_on_output_tokens_per_second(tmp_path: Path) -> None:
    searched = with_params(max_new_tokens={"choices": [16, 512]})
    with pytest.raises(SpaceError, match="max_new_tokens takes 2 values but workload.output"):
        load_space(str(write_space(tmp_path, searched)))
    # Forced answer lengths make it equal work; ranking on request rate or latency is fine too.
    forced = {**searched, "deploy": "lmdeploy", "workload": {"output_tokens": 128}}
    assert load_space(str(write_space(tmp_path, forced))).workload.output_tokens == 128
    by_latency = {**searched, "objectives": [{"metric": "e2e_latency_p95_ms"}]}
    load_space(str(write_space(tmp_path, by_latency)))
    # A candidate with a longer answer cap counts as searching it.
    candidate = {**BASE, "candidates": [{"name": "long", "config": {"max_new_tokens": 512}}]}
    with pytest.raises(SpaceError, match="max_new_tokens takes 2 values"):
        load_space(str(write_space(tmp_path, candidate)))


def test_a_forced_answer_length_is_refused_where_swift_would_measure_or_deploy(
    tmp_path: Path,
) -> None:
    forced = {**BASE, "workload": {"output_tokens": 64}}  # deploys with swift (the default)
    with pytest.raises(SpaceError, match="workload.output_tokens: swift requests cannot force"):
        load_space(str(write_space(tmp_path, forced)))
    swift_trials = {
        **forced,
        "deploy": "lmdeploy",
        "params": {**BASE["params"], "backend": {"choices": ["lmdeploy", "swift"]}},
    }
    with pytest.raises(SpaceError, match="swift requests cannot force an answer length"):
        load_space(str(write_space(tmp_path, swift_trials)))


def test_spread_answer_lengths_need_a_mean_and_stay_equal_work(tmp_path: Path) -> None:
    spread_alone = {**BASE, "deploy": "lmdeploy", "workload": {"output_tokens_spread": 0.5}}
    with pytest.raises(SpaceError, match="output_tokens is not set"):
        load_space(str(write_space(tmp_path, spread_alone)))
    # Every trial draws the same sequence, centred on the mean and inside its bounds.
    first, second = AnswerLengths(128, 0.5), AnswerLengths(128, 0.5)
    drawn = [first.next() for _ in range(4000)]
    assert drawn == [second.next() for _ in range(4000)]
    assert (min(drawn), max(drawn)) == (64, 192)
    assert abs(sum(drawn) / len(drawn) - 128) < 2
    assert {AnswerLengths(128).next() for _ in range(5)} == {128}
    assert length_bounds(1, 0.9) == (1, 2)


def test_the_sampler_is_tpe_with_steps_or_plain_random_search(tmp_path: Path) -> None:
    from autotune.study.proposals.sampler import CoveringSampler, make_sampler, startup_trials

    tpe = load_space(str(write_space(tmp_path, {**BASE, "budget": "30m"}, "tpe.yaml")))
    assert tpe.sampler.kind == "tpe" and tpe.sampler.steps
    assert isinstance(make_sampler(tpe), CoveringSampler)
    # TPE's start-up from the budget: a quarter of the ~55 s trials it should buy, 4-10.
    assert startup_trials(tpe) == 8
    assert startup_trials(tpe.model_copy(update={"budget": 300.0})) == 4
    assert startup_trials(tpe.model_copy(update={"budget": 7200.0})) == 10
    assert startup_trials(tpe.model_copy(update={"budget": None, "trials": 12})) == 4
    random_data = {**BASE, "sampler": {"kind": "random", "steps": False}}
    random = load_space(str(write_space(tmp_path, random_data, "random.yaml")))
    assert isinstance(make_sampler(random), optuna.samplers.RandomSampler)
    assert not random.sampler.steps
    bad = write_space(tmp_path, {**BASE, "sampler": {"kind": "cmaes"}}, "bad.yaml")
    with pytest.raises(SpaceError, match=r"sampler.kind: .*'tpe' or 'random'"):
        load_space(str(bad))


def test_launch_steps_keep_their_earlier_name(tmp_path: Path) -> None:
    old = load_space(str(write_space(tmp_path, {**BASE, "launches": {"random_launches": 1}})))
    assert old.launches.launch_steps == 1
    new = write_space(tmp_path, {**BASE, "launches": {"launch_steps": 0}}, "new.yaml")
    assert load_space(str(new)).launches.launch_steps == 0
