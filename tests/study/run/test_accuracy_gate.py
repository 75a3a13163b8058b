"""Whether a trial's accuracy pass can change the recommendation, decided after its load
test (autotune.study.run.accuracy_gate): over a limit, or no faster than the search record,
it is not judged, and says why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
from optuna.trial import create_trial
from small_space import small_space

from autotune.measure.timing import RequestTiming
from autotune.params import TrialConfig
from autotune.records import SessionResult
from autotune.space import load_space
from autotune.study import plan_study
from autotune.study.plan import StudyPlan
from autotune.study.run.accuracy_gate import not_judged


def _plan(tmp_path: Path) -> tuple[StudyPlan, optuna.Study]:
    space = load_space(str(small_space(tmp_path)))
    space.constraints.memory_budget_mib = 1000.0
    url = f"sqlite:///{tmp_path}/gate.db"
    plan = plan_study(space, study_name="gate", storage_url=url)
    study = optuna.create_study(study_name="gate", storage=url, directions=space.directions())
    return plan, study


def _load(rate_per_s: float, *, memory_mib: float = 500.0) -> SessionResult:
    """A settled load at `rate_per_s` output tokens/s: requests back to back, 0.2 s each."""
    rng = np.random.default_rng(1)
    timings, at = [], 0.0
    while at < 8.0:
        e2e = 0.2 * (1 + 0.05 * float(rng.standard_normal()))
        tokens = max(1, round(rate_per_s * e2e))
        timings.append(RequestTiming(at, at + 0.02, at + e2e, at + e2e, tokens))
        at += e2e
    return SessionResult(
        load_s=at, load_start=0.0, load_stop=at, min_warmup_s=0.2, timings=timings,
        stop_reason="target_ci", peak_memory_mib=memory_mib, memory_source="rss",
        environment={"clock": "wall clock"},
    )  # fmt: skip


def _reference(study: optuna.Study, rate_per_s: float, *, deployable: bool) -> int:
    values = [rate_per_s] + [100.0] * (len(study.directions) - 1)
    attrs = {"is_reference": True, "deployable": deployable}
    study.add_trial(create_trial(values=values, user_attrs=attrs))
    return study.trials[-1].number


def test_a_trial_slower_than_the_record_or_over_a_limit_is_not_judged(tmp_path: Path) -> None:
    plan, study = _plan(tmp_path)
    config = TrialConfig(batch_size=2)
    assert not_judged(plan, study, config, _load(100.0), startup_s=1.0) is None  # no record
    reference = _reference(study, 400.0, deployable=True)
    slower = not_judged(plan, study, config, _load(100.0), startup_s=1.0)
    assert slower is not None and slower.reason == "slower"
    assert slower.record_trial == reference
    assert slower.line() == f"accuracy not judged: slower than the reference (trial #{reference})"
    assert not_judged(plan, study, config, _load(1000.0), startup_s=1.0) is None  # faster
    over = not_judged(plan, study, config, _load(1000.0, memory_mib=2000.0), startup_s=1.0)
    assert over is not None and over.reason == "memory" and over.record_trial is None


def test_a_reference_that_cannot_deploy_sets_no_record(tmp_path: Path) -> None:
    plan, study = _plan(tmp_path)
    _reference(study, 400.0, deployable=False)
    assert not_judged(plan, study, TrialConfig(batch_size=2), _load(100.0), startup_s=1.0) is None
