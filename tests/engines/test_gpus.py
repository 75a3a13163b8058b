"""GPUs of a run: which ones --gpus names, tensor_parallel within them, where trials ran."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState, create_trial
from small_space import autotune_cli, small_space

from autotune.engines.gpus import describe, differs, pinned_env, select_gpus, visible_gpus
from autotune.errors import SpaceError, StudyError
from autotune.export import render_export
from autotune.params import TrialConfig
from autotune.space import load_space
from autotune.space.narrowing import for_gpus
from autotune.space.sampling import applies
from autotune.study.results.counting import is_surplus
from autotune.study.results.timeshare import budget_seconds
from autotune.study.store.storage import check_several_writers, default_storage_url


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_FAKE_GPUS", "NVIDIA H200@1980,NVIDIA H100@1755")


def test_gpus_option_names_devices(two_gpus: None) -> None:
    assert [g.index for g in select_gpus("all")] == [0, 1]
    assert [g.name for g in select_gpus("1")] == ["NVIDIA H100"]
    assert [g.index for g in select_gpus(" 1, 0 ")] == [1, 0]
    for spec, words in [
        ("2", "there is no GPU 2 (this machine has 0, 1)"),
        ("0,0", "GPU 0 is named twice"),
        ("first", "'first' is not a GPU index"),
        ("0,,1", "'' is not a GPU index"),
    ]:
        with pytest.raises(SpaceError, match="--gpus") as info:
            select_gpus(spec)
        assert words in str(info.value)


def test_gpus_option_on_a_machine_without_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_FAKE_GPUS", raising=False)
    monkeypatch.setattr("autotune.engines.gpus._nvml_gpus", lambda: [])
    with pytest.raises(SpaceError, match="no NVIDIA GPU"):
        select_gpus("all")
    assert visible_gpus() == []


def test_pinning_and_descriptions(two_gpus: None) -> None:
    h200, h100 = select_gpus("all")
    assert pinned_env([h200]) == {"CUDA_VISIBLE_DEVICES": ""}  # faked: the engine uses the CPU
    real = h200.__class__(**{**h200.to_dict(), "fake": False})
    other = h100.__class__(**{**h100.to_dict(), "fake": False})
    assert pinned_env([real, other]) == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    assert describe([h200.to_dict()]) == "GPU 0 (NVIDIA H200, 1980 MHz)"
    assert differs([h200.to_dict()], [h200.to_dict()]) is None
    assert "NVIDIA H100" in str(differs([h100.to_dict()], [h200.to_dict()]))
    slower = {**h200.to_dict(), "sm_clock_mhz": 1500}
    assert "1500 MHz" in str(differs([slower], [h200.to_dict()]))


def _space_with_tp(tmp_path: Path, choices: list[int]) -> Path:
    return small_space(
        tmp_path,
        params={
            "backend": {"choices": ["transformers", "lmdeploy"]},
            "tensor_parallel": {"choices": choices},
        },
    )


def test_tensor_parallel_is_searched_only_up_to_the_runs_gpus(tmp_path: Path) -> None:
    space = load_space(str(_space_with_tp(tmp_path, [1, 2, 4])))
    narrowed, notes = for_gpus(space, 2)
    assert narrowed.params["tensor_parallel"].choices == [1, 2]
    assert notes == [
        "dropped from the search: tensor_parallel above 2 (this run has 2 GPU(s); --gpus gives "
        "more)"
    ]
    same, notes = for_gpus(space, 4)
    assert same.params["tensor_parallel"].choices == [1, 2, 4] and notes == []
    with pytest.raises(SpaceError, match="every params.tensor_parallel value"):
        for_gpus(load_space(str(_space_with_tp(tmp_path, [2, 4]))), 1)


def test_tensor_parallel_belongs_to_lmdeploy_and_vllm_only(tmp_path: Path) -> None:
    space = load_space(str(_space_with_tp(tmp_path, [1, 2])))
    assert applies(space, "tensor_parallel", {"backend": "lmdeploy"})
    assert not applies(space, "tensor_parallel", {"backend": "transformers"})
    assert not applies(space, "tensor_parallel", {"backend": "swift"})
    lmdeploy = render_export(
        TrialConfig(backend="lmdeploy", tensor_parallel=2), fmt="lmdeploy", model="m"
    )
    assert lmdeploy.argv[lmdeploy.argv.index("--tp") + 1] == "2"
    vllm = render_export(TrialConfig(backend="vllm", tensor_parallel=2), fmt="vllm", model="m")
    assert vllm.argv[vllm.argv.index("--tensor-parallel-size") + 1] == "2"
    single = render_export(TrialConfig(backend="lmdeploy"), fmt="lmdeploy", model="m")
    assert "--tp" not in single.argv


def test_a_study_is_not_resumed_over_other_tensor_parallel_values(tmp_path: Path) -> None:
    """Searched over [1, 2] on two GPUs; one GPU could only search [1]: one clear line."""
    space = _space_with_tp(tmp_path, [1, 2])
    storage = f"sqlite:///{tmp_path / 'tp.db'}"
    study = optuna.create_study(
        study_name="tp", storage=storage, directions=["maximize", "minimize"]
    )
    study.add_trial(
        create_trial(
            params={"tensor_parallel": 2},
            distributions={"tensor_parallel": optuna.distributions.CategoricalDistribution([1, 2])},
            values=[1.0, 1.0],
        )
    )
    metrics = ["throughput_output_tokens_per_s", "e2e_latency_p95_ms"]
    study.set_user_attr("objective_metrics", metrics)
    result = autotune_cli(
        "run", "--space", str(space), "--study", "tp", "--storage", storage, cwd=tmp_path
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "searched tensor_parallel over [1, 2], this run can only search [1]" in result.stderr


def test_several_workers_refuse_sqlite_and_default_to_a_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert default_storage_url("s") == "sqlite:///studies/s.db"
    assert default_storage_url("s", several_writers=True) == "studies/s.journal"
    with pytest.raises(StudyError, match="cannot share a SQLite database"):
        check_several_writers("sqlite:///studies/s.db")
    check_several_writers("studies/s.journal")
    check_several_writers("postgresql+psycopg://u@h/db")
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "old.db").touch()
    with pytest.raises(StudyError, match="stored in SQLite"):
        default_storage_url("old", several_writers=True)
    (tmp_path / "studies" / "j.journal").touch()
    assert default_storage_url("j") == "studies/j.journal"  # a journal study resumes as one


@pytest.mark.slow
def test_gpus_with_a_sqlite_storage_is_one_line(tmp_path: Path) -> None:
    space = small_space(tmp_path)
    env = {**os.environ, "AUTOTUNE_FAKE_GPUS": "2"}
    url = f"sqlite:///{tmp_path / 'x.db'}"
    result = autotune_cli(
        "run", "--space", str(space), "--gpus", "all", "--storage", url, cwd=tmp_path, env=env
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "several workers (--gpus) cannot share a SQLite database" in result.stderr
    assert not (tmp_path / "x.db").exists()
    wrong = autotune_cli("run", "--space", str(space), "--gpus", "5", cwd=tmp_path, env=env)
    assert wrong.returncode == 2 and "there is no GPU 5" in wrong.stderr
    assert not (tmp_path / "studies").exists()


def _trial(state: TrialState, number: int, **attrs: object) -> optuna.trial.FrozenTrial:
    now = dt.datetime.now()
    return optuna.trial.FrozenTrial(
        number=number,
        state=state,
        value=1.0 if state == TrialState.COMPLETE else None,
        datetime_start=now,
        datetime_complete=now if state.is_finished() else None,
        params={},
        distributions={},
        user_attrs=dict(attrs),
        system_attrs={},
        intermediate_values={},
        trial_id=number,
    )


def test_a_trial_beyond_the_target_steps_back() -> None:
    study = optuna.create_study()
    for number in range(3):
        study.add_trial(_trial(TrialState.COMPLETE, number))
    study.add_trial(_trial(TrialState.COMPLETE, 3, duplicate_of=0))  # not counted
    study.add_trial(_trial(TrialState.FAIL, 4, failure_kind="crash"))  # not counted
    running = study.ask()  # trial 5, another worker's
    assert running.number == 5
    assert not is_surplus(study, 5, target=4)  # 3 counted before it: it is needed
    assert is_surplus(study, 6, target=4)  # 3 counted + trial 5 running: 6 is one too many
    assert not is_surplus(study, 6, target=5)


def test_budget_counts_a_trials_share_of_the_gpus_without_its_waits() -> None:
    alone = _trial(TrialState.COMPLETE, 0, time_s={"total": 100.0})
    shared = _trial(
        TrialState.COMPLETE,
        1,
        time_s={"total": 100.0, "gpu_wait": 20.0, "twin_wait": 10.0},
        gpu_share=0.5,
    )
    assert budget_seconds(alone) == 100.0
    assert budget_seconds(shared) == pytest.approx(35.0)
