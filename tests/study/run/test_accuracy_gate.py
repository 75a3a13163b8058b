"""Which of a trial's accuracy passes can change the recommendation, decided after its load
test (autotune.study.run.accuracy_gate): over a limit it is not judged; no faster than the
best confirmed trial it is judged but not confirmed; each says why."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest
from optuna.trial import create_trial
from small_space import small_space
from synthetic_load import back_to_back_load, capped_batch_one_load

from autotune.errors import TrialFailure
from autotune.params import TrialConfig
from autotune.records import SessionResult
from autotune.space import load_space
from autotune.study import plan_study
from autotune.study.plan import StudyPlan
from autotune.study.run.accuracy_gate import not_confirmed, not_judged
from autotune.study.run.measuring import MeasuredRun
from autotune.study.run.objective import judged
from autotune.study.run.twins import AnswersPlan
from autotune.study.store.spool import ArtifactRecorder


def _plan(tmp_path: Path) -> tuple[StudyPlan, optuna.Study]:
    space = load_space(str(small_space(tmp_path)))
    space.constraints.memory_budget_mib = 1000.0
    url = f"sqlite:///{tmp_path}/gate.db"
    plan = plan_study(space, study_name="gate", storage_url=url)
    study = optuna.create_study(study_name="gate", storage=url, directions=space.directions())
    return plan, study


def _load(rate_per_s: float, *, memory_mib: float = 500.0) -> SessionResult:
    """A settled load at `rate_per_s` output tokens/s: requests back to back, 0.2 s each."""
    return back_to_back_load(
        rate_per_s,
        8.0,
        spread=0.05,
        stop_reason="target_ci",
        peak_memory_mib=memory_mib,
        environment={"clock": "wall clock"},
    )


def _reference(study: optuna.Study, rate_per_s: float, *, deployable: bool) -> int:
    values = [rate_per_s] + [100.0] * (len(study.directions) - 1)
    attrs = {"is_reference": True, "deployable": deployable}
    study.add_trial(create_trial(values=values, user_attrs=attrs))
    return study.trials[-1].number


def _confirmed(study: optuna.Study, rate_per_s: float) -> int:
    values = [rate_per_s] + [100.0] * (len(study.directions) - 1)
    attrs = {
        "deployable": True,
        "constraints": {"accuracy": -0.01, "memory": -1.0, "latency": 0.0, "deployable": 0.0},
        "paired_vs_reference": {"decision": "feasible", "test": "sequential"},
        "confirmation": {"decision": "confirmed", "index": 1, "error": 0.06},
    }
    study.add_trial(create_trial(values=values, user_attrs=attrs))
    return study.trials[-1].number


def test_over_a_limit_is_not_judged_and_slower_is_judged(tmp_path: Path) -> None:
    plan, study = _plan(tmp_path)
    config = TrialConfig(batch_size=2)
    reference = _reference(study, 400.0, deployable=True)
    # Slower than the reference: judged (the search floor), only its confirmation skipped.
    assert not_judged(plan, study, config, _load(100.0), startup_s=1.0) is None
    over = not_judged(plan, study, config, _load(1000.0, memory_mib=2000.0), startup_s=1.0)
    assert over is not None and over.reason == "memory" and over.record_trial is None
    assert over.line() == "accuracy not judged: its load test is over the memory budget"
    slower = not_confirmed(plan, study, config, _load(100.0), startup_s=1.0)
    assert slower is not None and slower.confirmed_trial == reference
    assert slower.line() == (
        f"not confirmed: slower than the reference (trial #{reference}), which may be recommended"
    )


def test_confirmed_only_when_faster_than_the_best_confirmed(tmp_path: Path) -> None:
    plan, study = _plan(tmp_path)
    config = TrialConfig(batch_size=2)
    assert not_confirmed(plan, study, config, _load(100.0), startup_s=1.0) is None  # none yet
    _reference(study, 400.0, deployable=False)  # cannot be recommended: counts not
    assert not_confirmed(plan, study, config, _load(100.0), startup_s=1.0) is None
    best = _confirmed(study, 800.0)
    slower = not_confirmed(plan, study, config, _load(500.0), startup_s=1.0)
    assert slower is not None and slower.confirmed_trial == best
    assert slower.line() == f"not confirmed: slower than trial #{best}, already confirmed"
    assert not_confirmed(plan, study, config, _load(1500.0), startup_s=1.0) is None  # faster


def test_a_load_with_no_measurement_answers_nothing_more_and_still_fails(tmp_path: Path) -> None:
    plan, study = _plan(tmp_path)
    config = TrialConfig(batch_size=2)
    load = _load(400.0)
    timings = [
        dataclasses.replace(t, output_tokens=0) for t in load.timings
    ]  # a load without tokens
    empty = load.model_copy(update={"timings": timings})
    why = not_judged(plan, study, config, empty, startup_s=1.0)
    assert why is not None and why.reason == "no-measurement"
    assert why.line() == "accuracy not judged: its load test is no measurement (the trial fails)"
    trial = study.ask()
    answers = AnswersPlan(known={}, source=None, accuracy_ids=None, floor=None, follow=True,
                          key=None)  # fmt: skip
    run = MeasuredRun(config=config, result=empty, startup_s=1.0, launch_id="l", answers=answers,
                      computed=0, reference=None, not_judged=why)  # fmt: skip
    artifacts = ArtifactRecorder(plan.storage_url, plan.study_name)
    with pytest.raises(TrialFailure) as failed:
        judged(trial, plan, run, {}, artifacts)
    attrs = study.trials[-1].user_attrs
    assert attrs["failure_reason"] == failed.value.reason and attrs["failure_kind"]
    assert attrs["accuracy_not_judged"]["reason"] == "no-measurement"


def test_the_capped_reference_read_without_a_window_is_still_judged(tmp_path: Path) -> None:
    """A context-only load too short for a steady window (the capped reference) is a
    measurement: its accuracy is judged, where the same load planned for any other trial is
    no measurement and answers nothing more."""
    plan, study = _plan(tmp_path)
    config = plan.space.reference_config()
    reference = capped_batch_one_load(context_only=True)
    assert not_judged(plan, study, config, reference, startup_s=1.0) is None
    other = capped_batch_one_load(context_only=False)
    why = not_judged(plan, study, config, other, startup_s=1.0)
    assert why is not None and why.reason == "no-measurement"
