"""bench/gpu/collect_study.py's baseline check: the study's trial of the engine's defaults
against fresh launches of the same defaults (bench/gpu/grid.py)."""

from __future__ import annotations

import sys

import optuna
from optuna.trial import TrialState, create_trial
from small_space import REPO

sys.path.insert(0, str(REPO))

from bench.gpu.collect_study import CI, TPS, baseline_check


def _study(baseline_tps: float, rel: float) -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "minimize"])
    tuned = {"config": {"backend": "lmdeploy"}, TPS: 2150.0, CI: 0.12}
    defaults = {"config": {"backend": "lmdeploy", "engine_defaults": True}, TPS: baseline_tps}
    for attrs in (tuned, {**defaults, CI: rel}):
        study.add_trial(
            create_trial(state=TrialState.COMPLETE, values=[1.0, 1.0], user_attrs=attrs)
        )
    return study


def _row(tps: float, *, defaults: bool = True) -> dict[str, object]:
    launch = {"backend": "lmdeploy", "engine_defaults": True} if defaults else {}
    return {"launch": launch, "status": "ok", "figures": {TPS: tps, CI: 0.1}}


def test_fresh_defaults_inside_the_baseline_s_interval_pass() -> None:
    check = baseline_check(
        _study(1700.0, 0.12), [_row(1691.3), _row(1800.0), _row(900, defaults=False)]
    )
    assert check["passed"] is True and check["trial"] == 1
    assert [run["inside"] for run in check["runs"]] == [True, True]  # the tuned row left out
    assert check["fresh_mean"] == (1691.3 + 1800.0) / 2


def test_a_fresh_launch_outside_the_interval_fails_the_check() -> None:
    check = baseline_check(_study(1700.0, 0.05), [_row(1691.3), _row(2000.0)])
    assert check["passed"] is False
    assert [run["inside"] for run in check["runs"]] == [True, False]


def test_no_baseline_trial_or_no_fresh_launch_is_said() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    assert baseline_check(study, [_row(1.0)]) == {
        "passed": None,
        "why": "the study measured no baseline trial",
    }
    assert baseline_check(_study(1700.0, 0.1), [_row(1.0, defaults=False)])["passed"] is None
