"""A trial's plan (autotune.study.run.trial_plan): the reference that the deploy target cannot
run stops early, and the study's first deployable figure is measured to a looser interval so
that the steps racing it start sooner (the study loop on the replay's simulated engine,
bench/cpu/replay_engine.py, the H200's surface); the plan is made without writing a thing."""

from __future__ import annotations

import importlib
from pathlib import Path

import optuna
import pytest
from small_space import quick_space

from autotune.engines.session import measure_plan
from autotune.params import TrialConfig
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.records.writer import write_study
from autotune.space import load_space
from autotune.study.plan import StudyPlan, plan_study
from autotune.study.results.progress import measuring_caveat
from autotune.study.run.budget import Budget
from autotune.study.run.trial_plan import (
    FIRST_FIGURE_TARGET_CI_REL,
    Proposal,
    RolePlan,
    first_figure_plan,
    only_a_baseline,
    plan_measure,
    reference_plan,
)
from autotune.study.run.twins import AnswersPlan

REPO = Path(__file__).resolve().parents[3]


def test_the_looser_plans_only_loosen_the_stop_rule() -> None:
    space = load_space("default")
    plan = measure_plan(space, TrialConfig(backend="lmdeploy", batch_size=64), accuracy_ids=None)
    first = first_figure_plan(plan)
    assert plan.target_ci_rel == 0.03 and first.target_ci_rel == FIRST_FIGURE_TARGET_CI_REL
    assert first.model_dump(exclude={"target_ci_rel"}) == plan.model_dump(exclude={"target_ci_rel"})
    # A space that asks for a looser interval keeps its own.
    loose = plan.model_copy(update={"target_ci_rel": 0.08})
    assert first_figure_plan(loose).target_ci_rel == 0.08
    # The reference that only feeds the "x" figure: its whole load (warm-up and window) at
    # most the space's reference_max_s, never longer than the space's own caps.
    cap = space.workload.reference_max_s
    reference = reference_plan(plan, max_s=cap)
    assert reference.max_load_s == cap < plan.max_load_s
    assert reference.max_measure_s == cap < plan.max_measure_s
    assert reference.target_ci_rel == 0.10
    assert reference_plan(plan, max_s=1e6).max_load_s == plan.max_load_s


@pytest.mark.slow  # a whole study, on the replay's simulated engine
def test_the_first_deployable_figure_is_looser_and_every_later_one_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "bench" / "cpu"))
    replay = importlib.import_module("replay")
    # 10 minutes: in 7 the baseline (LMDeploy's defaults) takes the last launch, before a step.
    run = replay.run_one("study", 0, 600.0)
    reference, candidate, *later = run["proposals"]
    assert reference["candidate"] is None and not reference["first_figure"]
    # The reference's load stops at its cap (or its +-10%), never the space's 150 s window.
    assert reference["measuring_s"] <= load_space("default").workload.reference_max_s + 10
    # The named candidate gave the first figure: it stopped on the looser target, not on the
    # space's +-3%, and the step that beat it was measured to +-3%.
    assert candidate["candidate"] == "lmdeploy-graphs" and candidate["first_figure"]
    assert candidate["stop"] == "converged"
    assert 0.03 < candidate["ci_within_rel"] <= FIRST_FIGURE_TARGET_CI_REL
    assert later and not any(p["first_figure"] for p in later)
    winner = next(p for p in later if p["step"])
    assert winner["step"] and winner["state"] == "COMPLETE" and winner["stop"] == "converged"
    assert winner["ci_within_rel"] <= 0.03


def test_the_progress_line_says_why_the_first_figure_is_looser() -> None:
    first = TrialRecord.from_attrs(
        {"first_figure": True, "measure_stop_reason": "converged"}, number=1
    )
    later = TrialRecord.from_attrs({"measure_stop_reason": "converged"}, number=2)
    assert "first figure" in measuring_caveat(first) and measuring_caveat(later) == ""


def _planned(tmp_path: Path, **role: bool) -> tuple[StudyPlan, optuna.Study, RolePlan]:
    """The plan of a trial in a fresh smoke study (racing on, nothing finished yet), with the
    `role` flags of its proposal (is_reference, baseline)."""
    space = load_space(str(quick_space("smoke", tmp_path)))
    url = f"sqlite:///{tmp_path}/plan.db"
    plan = plan_study(space, study_name="plan", storage_url=url)
    study = optuna.create_study(study_name="plan", storage=url, directions=space.directions())
    write_study(study, StudyRecord.part(objective_metrics=[o.metric for o in space.objectives]))
    study.ask()
    config = space.reference_config() if role.get("is_reference") else TrialConfig(batch_size=2)
    proposal = Proposal(
        config,
        config.output_key(),
        role.get("is_reference", False),
        sampled=not role,
        baseline=role.get("baseline", False),
    )
    answers = AnswersPlan({}, None, None, None, follow=False, key=None)
    planned = plan_measure(
        plan, study, proposal, answers, launch_id="launch-a", budget=Budget(None), used_s=0.0
    )
    return plan, study, planned


@pytest.mark.parametrize("role", [{}, {"baseline": True}])
def test_the_first_deployable_figure_is_planned_looser_and_nothing_is_written(
    tmp_path: Path, role: dict[str, bool]
) -> None:
    """The plan says the first figure; the trial's record says it only once the measure step
    writes it (autotune.study.run.measuring)."""
    plan, study, planned = _planned(tmp_path, **role)
    assert planned.first_figure and planned.rival is None
    space_plan = measure_plan(plan.space, TrialConfig(batch_size=2), accuracy_ids=None)
    assert planned.measure == first_figure_plan(space_plan)
    [trial] = study.get_trials(deepcopy=False)
    assert trial.user_attrs == {} and not TrialRecord.of(trial).first_figure
    assert set(study.user_attrs) == {"objective_metrics"}  # what the test itself wrote


def test_the_reference_is_never_the_first_figure(tmp_path: Path) -> None:
    plan, _, planned = _planned(tmp_path, is_reference=True)
    assert not planned.first_figure and planned.rival is None
    config = plan.space.reference_config()
    space_plan = measure_plan(plan.space, config, accuracy_ids=None)
    baseline = only_a_baseline(plan.space, config, endpoint=None)
    cap = plan.space.workload.reference_max_s
    assert planned.measure == (reference_plan(space_plan, max_s=cap) if baseline else space_plan)
    # Only a reference the deploy target cannot run is context only (read without a window).
    assert planned.measure.context_only == baseline


def test_the_capped_reference_is_context_only_and_says_so() -> None:
    """reference_plan marks its load context only (autotune.measure.summary reads it after
    its first request where it has no window); no other plan is, and a reference read so
    says on its progress line that its figure has no interval."""
    space = load_space("default")
    plan = measure_plan(space, space.reference_config(), accuracy_ids=None)
    assert not plan.context_only and not first_figure_plan(plan).context_only
    assert reference_plan(plan, max_s=space.workload.reference_max_s).context_only
    windowless = TrialRecord.from_attrs({"throughput_window": 0.0, "warmup_settled": 0.0}, number=0)
    assert "no interval" in measuring_caveat(windowless)
    assert "never settled" in measuring_caveat(
        TrialRecord.from_attrs({"warmup_settled": 0.0}, number=1)
    )
