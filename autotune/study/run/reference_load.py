"""The start measured only as much as its roles need: the reference and the first figure.

A reference that the deploy target cannot run (the default space's transformers, batch 1,
beside LMDeploy) is never recommended: its speed only feeds the "x the reference" figure,
and its accuracy pass (on real weights) is the floor's baseline, which this does not touch.
Measured to the space's +-3%, its single stream ran to the 150 s cap on the H200 (+-25% even
then: 4 s requests whose lengths are spread +-50%). So its load test stops at +-10%, or after
REFERENCE_MAX_MEASURE_S of steady window, and the figure carries the interval it reached
(autotune.report.ratio propagates it into the ratio). A reference the target can deploy (an
endpoint's, a swift space's) may be the recommendation and is measured like any trial.

The next launch starts beside such a reference (autotune.study.run.launches), so the first
deployable launch's start-up (54-84 s for LMDeploy with CUDA graphs on an H100 or H200) runs
during the reference's own start-up, warm-up and window instead of after them. The window is
30 s: with 60 s the reference (13-17 s of start-up, 26-42 s of warm-up) outlasted that
start-up, and the launch beside it stood ready and idle. On the GPU a 39-47 s window left
the reference at +-10-23% anyway (its rate never settles), and `best` prints the ratio with
the interval it got. Its load may use the space's whole warm-up before that window
(REFERENCE_MAX_WARMUP_S): with 20 s allowed, an H100's 29 s warm-up left 24 s of window in
the 50 s bound, fewer batch means than an interval needs, and the reference's line had no
interval (bench/results/h100-i42-2026-12-06.md, call 3). The replay is unchanged by it.

The study's first deployable figure (the named candidate, on a study that ranks by throughput
and races) only has to be good enough to race: the one-lever steps start from it and race it,
and the step that beats it is measured to the space's +-3% like every later trial. So that
trial stops at +-FIRST_FIGURE_TARGET_CI_REL instead, its record says `first_figure`, and the
steps start a minute sooner (the H100's candidate ran 153 s to its cap at +-3%). Its recorded
interval carries the spread between launches as well, so it widens little: +-12.1% to
+-13.2% in the default space. Replayed over 20 seeds
(bench/results/replay-first-figure-2026-12-06.md), the 30 s window and the first figure
bring the median time to 95% of the best from 340 s to 285 s.
"""

from __future__ import annotations

import optuna

from autotune.backends import BACKENDS
from autotune.engines.session import MeasurePlan
from autotune.params import TrialConfig
from autotune.records.writer import write_trial
from autotune.space import SearchSpace
from autotune.study.plan import StudyPlan
from autotune.study.run.racing import Incumbent, awaits_first_figure

REFERENCE_TARGET_CI_REL = 0.10
REFERENCE_MAX_WARMUP_S = 45.0
REFERENCE_MAX_MEASURE_S = 30.0
FIRST_FIGURE_TARGET_CI_REL = 0.06


def only_a_baseline(space: SearchSpace, config: TrialConfig, *, endpoint: str | None) -> bool:
    """Whether the reference `config` can never be recommended: the deploy target runs
    another engine (an endpoint study's reference is that server's own)."""
    backend = BACKENDS.get(space.deploy) if endpoint is None else None
    return backend is not None and config.backend not in backend.deploys


def reference_plan(plan: MeasurePlan) -> MeasurePlan:
    """`plan` with the reference's looser stop rule and shorter caps (never longer)."""
    return plan.model_copy(
        update={
            "target_ci_rel": max(plan.target_ci_rel, REFERENCE_TARGET_CI_REL),
            "max_measure_s": min(plan.max_measure_s, REFERENCE_MAX_MEASURE_S),
            "max_load_s": min(plan.max_load_s, REFERENCE_MAX_WARMUP_S + REFERENCE_MAX_MEASURE_S),
        }
    )


def first_figure_plan(plan: MeasurePlan) -> MeasurePlan:
    """`plan` for the study's first deployable figure, the incumbent its first steps race."""
    return plan.model_copy(
        update={"target_ci_rel": max(plan.target_ci_rel, FIRST_FIGURE_TARGET_CI_REL)}
    )


def plan_for_role(
    trial: optuna.Trial,
    measure: MeasurePlan,
    plan: StudyPlan,
    config: TrialConfig,
    is_reference: bool,
    rival: Incumbent | None,
) -> MeasurePlan:
    """`measure` as the trial's role needs it: the reference that is only a baseline stops
    early; the study's first deployable figure (no `rival` to race yet) stops at the looser
    target and its record says so; every other trial keeps the space's plan."""
    space = plan.space
    if is_reference:
        baseline = only_a_baseline(space, config, endpoint=plan.endpoint)
        return reference_plan(measure) if baseline else measure
    if rival is not None or not awaits_first_figure(trial.study, space, plan.group):
        return measure
    write_trial(trial, {"first_figure": True})
    return first_figure_plan(measure)
