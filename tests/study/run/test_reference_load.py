"""The start measured only as much as its roles need (autotune.study.run.reference_load): the
reference that the deploy target cannot run stops early, and the study's first deployable
figure is measured to a looser interval so that the steps racing it start sooner (the study
loop on the replay's simulated engine, bench/cpu/replay_engine.py, the H200's surface); the
reference answers the floor's items a stage at a time, the same answers as in one pass (the
bundled model)."""

from __future__ import annotations

import importlib
import io
from pathlib import Path

import pytest
from rich.console import Console
from small_space import LOOP_WORKLOAD, run_study, small_evalset, small_space

from autotune.engines import open_session
from autotune.engines.session import measure_plan
from autotune.params import TrialConfig
from autotune.records.reference import study_extensions
from autotune.records.stored import TrialRecord
from autotune.space import load_space
from autotune.study.plan import plan_study
from autotune.study.results.progress import Progress, measuring_caveat
from autotune.study.run.launches import LaunchScheduler
from autotune.study.run.reference_load import (
    FIRST_FIGURE_TARGET_CI_REL,
    REFERENCE_MAX_MEASURE_S,
    ReferenceStages,
    answers_only,
    first_figure_plan,
    reference_plan,
)

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
    reference = reference_plan(plan)
    assert reference.max_measure_s == REFERENCE_MAX_MEASURE_S < plan.max_measure_s
    # Its load leaves room for the space's whole warm-up and then the window: on an H100 a
    # 29 s warm-up inside a 50 s bound left 24 s of window, too few batch means for an
    # interval, and the line showed the reference's speed without one.
    assert reference.max_load_s >= space.workload.max_warmup_s + REFERENCE_MAX_MEASURE_S


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
    # The reference's window stops at its cap (or its +-10%), never the space's 150 s.
    assert reference["measuring_s"] <= REFERENCE_MAX_MEASURE_S + 10
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


@pytest.mark.slow  # a study on the bundled model, then the reference launched twice more
def test_the_reference_s_staged_answers_are_the_ones_it_gives_in_one_pass(tmp_path: Path) -> None:
    evalset = small_evalset(tmp_path / "pool", n_text=40, n_shapes=8)
    # A loose floor: a candidate answering as the reference passes after a few items, so
    # the reference answers a few of the floor's stages of 48 items up front, the rest later.
    space_file = small_space(
        tmp_path,
        trials=1,
        evalset=str(evalset),
        workload={**LOOP_WORKLOAD, "accuracy_batch_size": 4},
        constraints={
            "accuracy": {"mode": "relative", "max_drop": 0.2, "confirmation": {"enabled": False}}
        },
    )
    result, study = run_study(space_file, study="staged", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    plan = plan_study(
        load_space(str(space_file)),
        study_name="staged",
        storage_url=f"sqlite:///{tmp_path / 'staged.db'}",
    )
    printed = io.StringIO()
    progress = Progress(total=1, console=Console(file=printed, width=200))
    stages = ReferenceStages(plan, LaunchScheduler(plan), progress)
    order = plan.evalset.decision_order()
    first, second, *_ = stages.stages
    assert stages.stages[-1] == 48 and second < 48
    reference = study.get_trials()[0]
    assert reference.user_attrs["answers_computed"] == first
    assert f"reference: {first} of 48 items answered (stage 1)" in result.stderr

    # The floor's next stage, then the rest, each answered by a fresh launch of the
    # reference at its batch of 4 (what a candidate undecided at its end asks for).
    stages.answers_for(study, order[:second], for_trial=7)
    scores = stages.answers_for(study, order, for_trial=None)
    assert set(scores.item_scores) == set(order)
    said = printed.getvalue()
    assert (
        f"reference: {second} of 48 items answered (stage 2: {second - first} more for trial 7"
        in said
    )
    assert (
        f"reference: 48 of 48 items answered (stage {len(stages.stages)}: {48 - second} more in"
        in said
    )
    extensions, problems = study_extensions(study)
    assert problems == [] and len(extensions) == 2
    added = extensions[0]
    assert (added.stage, added.answered_items, added.computed) == (2, second, second - first)
    assert (added.for_trial, added.batch_size) == (7, 4) and added.seconds > 0
    assert set(added.predictions) == set(order[first:second])
    assert extensions[1].cache_entry is None  # computed, none from the cache
    staged = stages.answers(study)
    assert staged is not None

    # The same reference answering all 48 items in one pass, one at a time.
    config = plan.space.reference_config()
    session = open_session(plan.space, config, model_path=plan.model_path, evalset=plan.evalset)
    try:
        one_pass = answers_only(plan.space, config, order).model_copy(
            update={"accuracy_batch_size": 1}
        )
        unstaged = session.measure(config, one_pass).predictions
    finally:
        session.close()
    assert {i: staged.predictions[i] for i in order} == {i: unstaged[i] for i in order}
