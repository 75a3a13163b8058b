"""Which trials a deploy target reproduces, and how `best`, `export` and ties treat the rest."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from autotune.cli import main
from autotune.export.reproduce import reproduction
from autotune.params import TrialConfig
from autotune.records.stored import TrialRecord
from autotune.study.results.select import NoDeployableTrial, recommend

IN_PROCESS = {"runner": "inprocess", "device": "cpu"}


def server(fmt: str) -> dict[str, str]:
    return {"runner": "server", "server_format": fmt}


def attrs(env: dict[str, str], **config: object) -> dict[str, object]:
    return {"config": TrialConfig(**config).model_dump(), "environment": env}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("trial", "target", "deployable", "why"),
    [
        (attrs(server("lmdeploy"), backend="lmdeploy"), "lmdeploy", True, "this very"),
        (attrs(server("lmdeploy"), backend="lmdeploy"), "vllm", False, "not the deploy target"),
        (attrs(server("swift"), backend="swift"), "swift", True, "this very"),
        (attrs(IN_PROCESS), "swift", True, "same image preprocessing"),
        (attrs(IN_PROCESS), "lmdeploy", False, "runs another engine"),
        (attrs(IN_PROCESS, compile_mode="reduce-overhead"), "swift", False, "torch.compile"),
        (attrs(IN_PROCESS, do_sample=True), "swift", False, "random numbers"),
        (attrs({"runner": "endpoint"}), "lmdeploy", True, "endpoint"),
    ],
)
def test_reproduction_rules(
    trial: dict[str, object], target: str, deployable: bool, why: str
) -> None:
    check = reproduction(TrialRecord.from_attrs(trial, number=0), target)
    assert check.deployable is deployable
    assert why in check.reason


def study_with(trials: list[tuple[dict[str, object], float, float, float]]) -> optuna.Study:
    """(attrs, tok/s, p95 ms, throughput_ci_rel) per trial; deploy target lmdeploy."""
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_user_attr("deploy_target", "lmdeploy")
    study.set_user_attr(
        "objective_metrics", ["throughput_output_tokens_per_s", "e2e_latency_p95_ms"]
    )
    for user_attrs, tps, p95, ci in trials:
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                values=[tps, p95],
                params={"batch_size": 1},
                distributions={"batch_size": CategoricalDistribution([1])},
                user_attrs={
                    **user_attrs,
                    "constraints": {"accuracy": -1.0, "memory": -1.0, "latency": 0.0},
                    "throughput_output_tokens_per_s": tps,
                    "throughput_ci_rel": ci,
                },
            )
        )
    return study


def test_what_ifs_are_never_recommended_and_say_why() -> None:
    study = study_with(
        [
            (attrs(IN_PROCESS), 30.0, 5000, 0.01),
            (attrs(IN_PROCESS, compile_mode="reduce-overhead"), 1071.0, 900, 0.01),
            (attrs(server("lmdeploy"), backend="lmdeploy"), 900.0, 1200, 0.01),
        ]
    )
    rec = recommend(study)
    assert rec.trial.number == 2  # the fastest deployable one, not the faster what-if
    assert rec.target == "lmdeploy"
    assert {t.number for t, _ in rec.what_ifs} == {0, 1}
    assert all("runs another engine" in why for _, why in rec.what_ifs)


def test_no_deployable_trial_is_one_line_with_the_what_ifs() -> None:
    study = study_with([(attrs(IN_PROCESS), 30.0, 5000, 0.01)])
    with pytest.raises(NoDeployableTrial) as info:
        recommend(study)
    assert "deploy target lmdeploy" in str(info.value) and "\n" not in str(info.value)
    assert [t.number for t, _ in info.value.what_ifs] == [0]


def test_a_tie_inside_the_intervals_goes_to_the_next_objective() -> None:
    lm = attrs(server("lmdeploy"), backend="lmdeploy")
    study = study_with([(lm, 1000.0, 5000, 0.03), (lm, 990.0, 2500, 0.03), (lm, 700.0, 900, 0.01)])
    rec = recommend(study)
    assert rec.trial.number == 1  # 1000 and 990 +-3% overlap: the lower p95 wins
    assert [t.number for t in rec.ties] == [0]
    assert "tied" in rec.reason
    apart = study_with([(lm, 1000.0, 5000, 0.005), (lm, 990.0, 2500, 0.005)])
    assert recommend(apart).trial.number == 0 and not recommend(apart).ties


def test_best_and_export_of_a_what_if(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'w.db'}"
    study = study_with(
        [
            (attrs(IN_PROCESS, compile_mode="reduce-overhead"), 1071.0, 900, 0.01),
            (attrs(server("lmdeploy"), backend="lmdeploy", max_batch_size=64), 900.0, 1200, 0.01),
        ]
    )
    study.set_user_attr("model", "Qwen/Qwen3-VL-2B-Instruct")
    optuna.copy_study(
        from_study_name=study.study_name,
        from_storage=study._storage,
        to_storage=storage,
        to_study_name="w",
    )
    runner = CliRunner()
    best = json.loads(runner.invoke(main, ["best", "--storage", storage, "--json"]).output)
    assert best["deploy_target"] == "lmdeploy"
    assert best["recommended"]["trial"] == 1
    assert best["what_ifs"][0]["trial"] == 0
    assert "torch.compile" not in best["what_ifs"][0]["not_deployable_because"]  # target lmdeploy
    text = runner.invoke(main, ["best", "--storage", storage]).output
    assert "what-ifs" in text and "trial 0: measured in-process" in text
    exported = runner.invoke(main, ["export", "--storage", storage])
    assert exported.exit_code == 0 and "lmdeploy serve api_server" in exported.output
    what_if = runner.invoke(main, ["export", "--storage", storage, "--trial", "0", "--json"])
    data = json.loads(what_if.output)
    assert data["exact"] is False
    # The engine the command changes is the one reason, said once (the renderer's note, not a
    # second what-if line saying the same); what a client must send is a note, not a reason.
    assert data["blockers"] == [data["notes"][0]]
    assert "measured with backend 'transformers'" in data["blockers"][0]
    assert any("chat-completions body" in note for note in data["notes"])
    strict = runner.invoke(main, ["export", "--storage", storage, "--trial", "0", "--strict"])
    assert strict.exit_code == 2 and len(strict.output.strip().splitlines()) == 1
    assert "cannot be expressed exactly as a command for lmdeploy" in strict.output
    assert "chat-completions" not in strict.output and ".;" not in strict.output
