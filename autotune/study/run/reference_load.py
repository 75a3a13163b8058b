"""The reference's load test, measured only as much as its role needs.

A reference that the deploy target cannot run (the default space's transformers, batch 1,
beside LMDeploy) is never recommended: its speed only feeds the "x the reference" figure,
and its accuracy pass (on real weights) is the floor's baseline, which this does not touch.
Measured to the space's +-3%, its single stream ran to the 150 s cap on the H200 (+-25% even
then: 4 s requests whose lengths are spread +-50%). So its load test stops at +-10%, or after
REFERENCE_MAX_MEASURE_S of steady window, and the figure carries the interval it reached
(autotune.report.ratio propagates it into the ratio). A reference the target can deploy (an
endpoint's, a swift space's) may be the recommendation and is measured like any trial.

The next launch starts beside such a reference (autotune.study.run.launches), so the first
deployable launch's start-up (49-69 s for LMDeploy with CUDA graphs on the H200) runs during
the reference's own start-up, warm-up and window (13 + 26 + 47 s there) instead of after
them. A 30 s window was tried: in the replay it cut the reference to about 66 s but left
its interval at +-20-34%, and the median time to 95% of the best moved within the
benchmark's own noise (bench/results/replay-beside-2026-12-04.md): the ratio would have said
little for it.
"""

from __future__ import annotations

from autotune.backends import BACKENDS
from autotune.engines.session import MeasurePlan
from autotune.params import TrialConfig
from autotune.space import SearchSpace

REFERENCE_TARGET_CI_REL = 0.10
REFERENCE_MAX_WARMUP_S = 20.0
REFERENCE_MAX_MEASURE_S = 60.0


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
