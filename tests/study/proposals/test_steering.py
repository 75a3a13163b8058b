"""One-lever steps from the incumbent (autotune.study.proposals.steering): which neighbour comes
next, and when a step counts as tried. The incumbent is given directly; the real study loop runs the
steps in tests/bench/test_replay.py and tests/study/run/test_racing.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState, create_trial
from small_space import run_study, small_space
from step_checks import assert_one_lever_each

import autotune.study.proposals.steering as steps
from autotune.params import TrialConfig
from autotune.space import load_space

SPACE = {
    "model": "some/model",
    "device": "cuda",
    "reference": {"backend": "lmdeploy", "dtype": "bfloat16", "max_new_tokens": 16},
    "params": {
        "backend": {"choices": ["lmdeploy", "transformers"]},
        "kv_cache_fraction": {"choices": [0.25, 0.5]},
        "image_max_side": {"choices": [None, 1024, 512]},
        "batch_size": {"choices": [1, 8, 64]},
        "do_sample": {"choices": [False, True]},
    },
}


def config(**values: Any) -> dict[str, Any]:
    base = {"backend": "lmdeploy", "dtype": "bfloat16", "kv_cache_fraction": 0.5,
            "batch_size": 64, "max_new_tokens": 16}  # fmt: skip
    return TrialConfig(**{**base, **values}).model_dump()


def trial(number: int, **values: Any) -> optuna.trial.FrozenTrial:
    made = create_trial(
        state=TrialState.COMPLETE, value=1.0, user_attrs={"config": config(**values)}
    )
    made.number = number
    return made


@pytest.fixture
def space(tmp_path: Path) -> Any:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE), encoding="utf-8")
    return load_space(str(path))


def next_after(
    space: Any, monkeypatch: pytest.MonkeyPatch, base: Any, *done: Any, launch: bool = True
) -> Any:
    """The step from `base` once the trials `done` (and `base`) ran."""
    study = optuna.create_study()
    for t in (base, *done):
        study.add_trial(t)
    monkeypatch.setattr(steps, "_incumbent", lambda _: study.get_trials()[0])
    return steps.next_step(space, study, launch_steps_left=launch)


def test_request_steps_bracket_each_lever_from_its_far_end_first(space, monkeypatch) -> None:
    base = trial(0)  # 64 in flight, full-size images
    first = next_after(space, monkeypatch, base)
    assert (first.lever, first.value, first.new_launch) == ("batch_size", 1, False) or (
        first.lever, first.value) == ("image_max_side", 512)  # fmt: skip
    # The incumbent's launch is pinned with it, and the other lever's far end comes before
    # either lever's near levels.
    assert first.pinned["kv_cache_fraction"] == 0.5 and first.pinned["backend"] == "lmdeploy"
    second = next_after(space, monkeypatch, base, trial(1, **{first.lever: first.value}))
    assert {(first.lever, first.value), (second.lever, second.value)} == {
        ("batch_size", 1), ("image_max_side", 512)}  # fmt: skip


def test_a_step_counts_as_tried_on_what_it_pins_only(space, monkeypatch) -> None:
    base = trial(0)
    # Every request-time level ran already, with other decoding settings: no request step.
    ran = [trial(n, batch_size=b, do_sample=True, temperature=0.5)
           for n, b in enumerate((1, 8), start=1)] + [
        trial(n, image_max_side=s) for n, s in enumerate((1024, 512), start=3)]  # fmt: skip
    step = next_after(space, monkeypatch, base, *ran)
    assert step.new_launch, step
    # The launch step to transformers ran: its stored configuration holds kv_cache_fraction
    # at its neutral None (transformers has no KV share), not the step's 0.5; it is tried.
    moved = trial(5, backend="transformers", kv_cache_fraction=None)
    after = next_after(space, monkeypatch, base, *ran, moved)
    assert (after.lever, after.value) == ("kv_cache_fraction", 0.25), after
    other_share = trial(6, kv_cache_fraction=0.25)
    assert next_after(space, monkeypatch, base, *ran, moved, other_share) is None
    # Launch steps used up: TPE proposes.
    assert next_after(space, monkeypatch, base, *ran, launch=False) is None


def test_an_interrupted_step_is_proposed_again(space, monkeypatch) -> None:
    base = trial(0)
    first = next_after(space, monkeypatch, base)
    cut = create_trial(state=TrialState.FAIL, user_attrs={
        "config": config(**{first.lever: first.value}), "failure_kind": "interrupted"})  # fmt: skip
    again = next_after(space, monkeypatch, base, cut)
    assert (again.lever, again.value) == (first.lever, first.value)


def test_a_step_copies_every_other_value_from_its_incumbent_decoding_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: the step "image_max_side 64 from trial 1" also turned sampling on. Every
    value but the step's lever is the incumbent's, the sampling settings of a sampling
    incumbent too."""
    data = {**SPACE, "params": {
        **SPACE["params"],
        "temperature": {"low": 0.2, "high": 1.0, "when": {"do_sample": [True]}},
        "top_k": {"choices": [5, 20, 50], "when": {"do_sample": [True]}},
        "repetition_penalty": {"choices": [1.0, 1.05]},
    }}  # fmt: skip
    path = tmp_path / "decoding.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    space = load_space(str(path))
    for decoding in (
        {"do_sample": False, "repetition_penalty": 1.05},
        {"do_sample": True, "temperature": 0.98, "top_k": 50, "repetition_penalty": 1.0},
    ):
        base = trial(0, **decoding)
        step = next_after(space, monkeypatch, base)
        want = {**base.user_attrs["config"], step.lever: step.value}
        for name, value in step.pinned.items():
            assert want[name] == value, (name, value, want)
        searched_now = {"backend", "kv_cache_fraction", *REQUEST_NAMES, *decoding}
        assert set(step.pinned) == searched_now, step.pinned
        assert step.also == ()


REQUEST_NAMES = ("image_max_side", "batch_size", "do_sample", "repetition_penalty")


@pytest.mark.slow
def test_each_step_of_an_in_process_study_changes_its_lever_only(tmp_path: Path) -> None:
    """The in-process path end to end (the server path: tests/end_to_end/test_smoke_study.py): the
    incumbent, a batch of 2 with the repetition penalty on, is stepped from with its penalty
    and decoding kept."""
    path = small_space(
        tmp_path,
        trials=4,
        candidates=[{"name": "two", "config": {"batch_size": 2, "repetition_penalty": 1.05}}],
        params={
            "image_max_side": {"choices": [None, 128]},
            "batch_size": {"choices": [1, 2, 4]},
            "do_sample": {"choices": [False, True]},
            "temperature": {"low": 0.2, "high": 1.0, "when": {"do_sample": [True]}},
            "repetition_penalty": {"choices": [1.0, 1.05]},
        },
    )
    result, study = run_study(path, study="s", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert assert_one_lever_each(study) >= 1, [t.user_attrs.get("step") for t in study.trials]
