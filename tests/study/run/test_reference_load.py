"""The start measured only as much as its roles need (autotune.study.run.reference_load): the
reference that the deploy target cannot run stops early, and the study's first deployable
figure is measured to a looser interval so that the steps racing it start sooner. The study
loop runs on the replay's simulated engine (bench/cpu/replay_engine.py), the H200's surface."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from autotune.engines.session import measure_plan
from autotune.params import TrialConfig
from autotune.records.stored import TrialRecord
from autotune.space import load_space
from autotune.study.results.progress import measuring_caveat
from autotune.study.run.reference_load import (
    FIRST_FIGURE_TARGET_CI_REL,
    REFERENCE_MAX_MEASURE_S,
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
    run = replay.run_one("study", 0, 420.0)
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
    winner = later[0]
    assert winner["step"] and winner["state"] == "COMPLETE" and winner["stop"] == "converged"
    assert winner["ci_within_rel"] <= 0.03


def test_the_progress_line_says_why_the_first_figure_is_looser() -> None:
    first = TrialRecord.from_attrs(
        {"first_figure": True, "measure_stop_reason": "converged"}, number=1
    )
    later = TrialRecord.from_attrs({"measure_stop_reason": "converged"}, number=2)
    assert "first figure" in measuring_caveat(first) and measuring_caveat(later) == ""
