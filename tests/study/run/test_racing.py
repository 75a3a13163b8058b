"""Racing: a trial whose interval lies below the incumbent's stops measuring, is recorded as
stopped by racing with its partial figures, and never costs the contender its full
measurement. The rule on synthetic loads, then a real study against a fake OpenAI server whose
speed is set by its chunk delay (so which trial is worse is known in advance)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import optuna
import pytest
import yaml
from fake_endpoint import endpoint_study, fake_endpoint
from fake_server import autotune
from optuna.trial import TrialState
from small_space import quick_space, small_space
from synthetic_load import back_to_back_load

from autotune.engines import measure_plan
from autotune.measure.convergence import (
    CONVERGED,
    MAX_REQUESTS,
    RACED,
    LoadSnapshot,
    RaceBound,
    SteadyRule,
)
from autotune.measure.steady import BIN_S
from autotune.records import SessionResult
from autotune.space import load_space
from autotune.study.results.live import LiveEstimate
from autotune.study.run.racing import Incumbent, check_stop, checked_stop


def steady_load(rate_per_s: float, seconds: float, *, noise: float = 0.1) -> LoadSnapshot:
    """A settled load at `rate_per_s` tokens/s (10% noise a bin: about +-2% on 6 s), requests
    of 0.2 s."""
    rng = np.random.default_rng(0)
    bins = int(seconds / BIN_S)
    series = rate_per_s * BIN_S * (1 + noise * rng.standard_normal(bins))
    return LoadSnapshot(
        series=series,
        elapsed_s=seconds,
        completed=int(seconds / 0.2),
        e2e_median_s=0.2,
        min_warmup_s=0.2,
        ends_s=list(np.arange(0.2, seconds, 0.2)),
    )


def rule(race: RaceBound | None) -> SteadyRule:
    # A target no load reaches: what stops these loads is racing or nothing.
    return SteadyRule(1e-6, 0.95, max_measure_s=60, max_load_s=60, max_requests=10**6, race=race)


def test_a_load_whose_interval_lies_below_the_incumbents_is_raced() -> None:
    slow = steady_load(100.0, 6.0)
    assert rule(RaceBound(150.0)).reason_to_stop(slow) == RACED
    # Inside the incumbent's interval, or no incumbent: it measures on.
    assert rule(RaceBound(101.0)).reason_to_stop(slow) is None
    assert rule(None).reason_to_stop(slow) is None
    # Two launches differ beyond their own intervals: a relaunch could close a 4% gap.
    assert rule(RaceBound(104.0)).reason_to_stop(slow) == RACED
    assert rule(RaceBound(104.0, spread_rel=0.06)).reason_to_stop(slow) is None


def test_the_running_estimate_is_written_while_the_trial_measures(tmp_path: Path) -> None:
    """Posted from the load's event loop, written by a thread: the running trial carries its
    latest estimate; a single-objective study gets Optuna intermediate values (one a step,
    the stop entry after a look in the same second included); a storage that refuses the
    write costs the figure, never the caller."""
    storage = f"sqlite:///{tmp_path}/live.db"
    one = optuna.create_study(study_name="one", storage=storage)
    trial = one.ask()
    shown: list[dict] = []
    live = LiveEstimate(trial, shown.append)
    live.post({"elapsed_s": 2.0, "completed": 3})  # no rate yet: nothing to show or write
    live.post({"elapsed_s": 5.2, "tokens_per_s": 10.0, "ci_rel": 0.2, "batches": 4})
    live.post({"elapsed_s": 5.9, "tokens_per_s": 11.0, "ci_rel": 0.1, "stop": "raced"})
    live.close()
    stored = optuna.load_study(study_name="one", storage=storage).trials[0]
    assert stored.state == TrialState.RUNNING
    assert stored.intermediate_values == {5: 10.0, 6: 11.0}
    assert stored.user_attrs["running_estimate"]["tokens_per_s"] == 11.0
    assert stored.user_attrs["running_estimate"]["stop"] == "raced"
    assert [entry["tokens_per_s"] for entry in shown] == [10.0, 11.0]
    # Two objectives: Optuna keeps no intermediate values, the attribute is written all the same.
    both = optuna.create_study(study_name="both", storage=storage, directions=["maximize"] * 2)
    live = LiveEstimate(both.ask(), shown.append)
    live.post({"elapsed_s": 5.0, "tokens_per_s": 10.0})
    live.close()
    stored = optuna.load_study(study_name="both", storage=storage).trials[0]
    assert stored.user_attrs["running_estimate"]["tokens_per_s"] == 10.0
    assert stored.intermediate_values == {}
    # A finished trial refuses writes: dropped and counted, the caller goes on.
    finished = one.ask()
    one.tell(finished, 1.0)
    live = LiveEstimate(finished, shown.append)
    live.post({"elapsed_s": 5.0, "tokens_per_s": 10.0})
    live.close()
    assert live.dropped == 1


def test_a_short_or_unsettled_load_is_never_raced() -> None:
    # Under two seconds hold too few batch means (4) for an interval to be trusted.
    assert rule(RaceBound(1000.0)).reason_to_stop(steady_load(100.0, 1.5)) is None
    # A rate still climbing through the whole load has not settled: it may yet win.
    climbing = steady_load(100.0, 8.0)
    ramp = np.linspace(0.2, 1.8, len(climbing.series))
    rising = LoadSnapshot(**{**climbing.__dict__, "series": climbing.series * ramp})
    assert rule(RaceBound(1000.0)).reason_to_stop(rising) is None


def steady_result(rate_per_s: float, seconds: float, *, wait_share: float) -> SessionResult:
    """A wall-clock load at `rate_per_s` output tokens/s, stopped by racing: requests back to
    back, 0.2 s each give or take 10%, its engine having waited `wait_share` for a core."""
    return back_to_back_load(
        rate_per_s,
        seconds,
        spread=0.1,
        stop_reason=RACED,
        peak_memory_mib=1.0,
        environment={"clock": "wall clock", "engine_wait_share": f"{wait_share:.3f}"},
    )


def test_a_checked_stop_stands_only_while_the_incumbent_measured_again_still_beats_it(
    tmp_path: Path,
) -> None:
    """racing.check_stop: a racing load judged against the incumbent measured again beside it
    (the real engine withdrawing a stop: tests/study/run/test_racing_load.py)."""
    space = load_space(str(small_space(tmp_path)))
    rival = Incumbent(number=4, tokens_per_s=300.0, bound=RaceBound(290.0), config=None)
    raced = steady_result(100.0, 8.0, wait_share=0.5)
    # Still clearly below the incumbent as it runs now: kept, both figures and loads recorded.
    check = check_stop(space, raced, steady_result(200.0, 8.0, wait_share=0.5), rival)
    assert check.kept is True
    assert check.tokens_per_s == pytest.approx(100.0, rel=0.05)
    assert check.incumbent_tokens_per_s == pytest.approx(200.0, rel=0.05)
    assert (check.wait_share, check.incumbent_wait_share) == (0.5, 0.5)
    assert (check.incumbent, check.recorded_tokens_per_s) == (4, 300.0)
    reason = Incumbent(4, 300.0, RaceBound(290.0), check=check).reason({"tokens_per_s": 99.0})
    assert "measured again right after, beside the same load, trial 4 gave 2" in reason
    assert "waited 50% of its time for a core in this load, 50% in trial 4's" in reason
    # As fast as the incumbent now: the recorded figure was a quieter moment's. Withdrawn.
    assert check_stop(space, raced, steady_result(100.0, 8.0, wait_share=0.5), rival).kept is False
    # The incumbent now too short for an interval: no evidence that the trial lost.
    short = check_stop(space, raced, steady_result(200.0, 0.5, wait_share=0.5), rival)
    assert short.kept is False and short.incumbent_ci_rel is None
    # The racing load waited more than the incumbent's fresh one: widened as a race is.
    assert check_stop(space, raced, steady_result(140.0, 8.0, wait_share=0.1), rival).kept is False


def test_a_stop_of_a_quiet_load_or_on_another_launch_stands_unchecked(tmp_path: Path) -> None:
    """Nothing is measured again (the launch here has no `measure`): a load whose engine
    hardly waited for a core ran at its idle pace, which only a faster incumbent beats; an
    incumbent on another launch would have to start again."""
    space = load_space(str(small_space(tmp_path)))
    config = space.reference_config()
    launch = cast(Any, SimpleNamespace(launch_key=config.launch_key()))
    rival = Incumbent(number=0, tokens_per_s=300.0, bound=RaceBound(290.0), config=config)
    plan = measure_plan(space, config, accuracy_ids=None, race=rival.bound)
    quiet = steady_result(100.0, 8.0, wait_share=0.01)
    assert checked_stop(launch, space, config, plan, quiet, rival) == (quiet, rival)
    busy = steady_result(100.0, 8.0, wait_share=0.5)
    other = config.model_copy(update={"dtype": "float32" if config.dtype == "auto" else "auto"})
    elsewhere = Incumbent(number=0, tokens_per_s=300.0, bound=RaceBound(290.0), config=other)
    assert checked_stop(launch, space, config, plan, busy, elsewhere) == (busy, elsewhere)


@pytest.mark.slow
def test_a_clearly_worse_trial_stops_early_and_the_contender_measures_to_its_target(
    tmp_path: Path,
) -> None:
    """Reference at 1 in flight, then the named candidate at 8 in flight (the incumbent, 8x
    the rate on a server whose pace is its chunk delay), then the study's own step to 2 in
    flight: a quarter of the incumbent's rate. Each load may run 90 s: only racing ends the
    loser's early. Named candidates are measured whole, so the loser is the sampled trial."""
    # A target of +-5%, not 3%: on a busy machine the client that streams the answers is
    # starved now and then, and the contender must still reach it well inside 90 s.
    path = quick_space("smoke", tmp_path, max_measure_s=90, max_warmup_s=5, target_ci_rel=0.05)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["candidates"] = [{"name": "eight", "config": {"batch_size": 8}}]
    data["params"]["batch_size"] = {"choices": [2, 8]}
    data["params"].pop("image_max_side")
    data["trials"] = 3
    # Racing is what this checks: the fake endpoint's answers are no reader's, so no held-out
    # confirmation could pass them (autotune.accuracy.confirm) and the reference would win.
    accuracy = data.setdefault("constraints", {}).setdefault("accuracy", {})
    accuracy["confirmation"] = {"enabled": False}
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    storage = f"sqlite:///{tmp_path}/r.db"
    with fake_endpoint("--chunk-delay", "0.01") as url:
        err = endpoint_study(path, "r", storage, url)
    best = autotune("best", "--study", "r", "--storage", storage, "--json")
    best_out, best_err = best.communicate(timeout=120)
    study = optuna.load_study(study_name="r", storage=storage)
    reference, eight, two = study.get_trials(deepcopy=False)
    assert reference.state == eight.state == TrialState.COMPLETE
    # The contender measured until its own rule stopped it, never by racing: at its target
    # interval, or at its bound on work or time where the machine's load kept the interval
    # from settling (CI beside two CPU hogs: 8,192 requests, or its time cap).
    contender_stop = eight.user_attrs["measure_stop_reason"]
    assert contender_stop in (CONVERGED, MAX_REQUESTS, "max_seconds"), contender_stop
    assert contender_stop != RACED
    if contender_stop == CONVERGED:
        assert eight.user_attrs["throughput_ci_within_rel"] <= 0.05
    # The study's first proposal was the step from the incumbent to the other concurrency.
    assert two.user_attrs["step"] == {"lever": "batch_size", "value": 2, "from_trial": 1}
    # The loser stopped within 20 s of measuring, with its partial figure and the reason.
    assert two.state == TrialState.PRUNED
    assert two.user_attrs["measure_stop_reason"] == RACED
    assert two.user_attrs["raced_by"] == eight.number
    # Stopped on work, not on a clock: fewer requests than the contender measured.
    assert two.user_attrs["measured_requests"] < eight.user_attrs["measured_requests"]
    partial = two.user_attrs["throughput_output_tokens_per_s"]
    assert partial < 0.5 * eight.user_attrs["throughput_output_tokens_per_s"]
    assert "stopped by racing" in two.user_attrs["raced_reason"]
    assert f"trial {eight.number}" in two.user_attrs["raced_reason"]
    assert "accuracy" not in two.user_attrs  # no accuracy pass for a trial that cannot win
    # While they measured, both wrote their running estimate to the storage.
    assert two.user_attrs["running_estimate"]["stop"] == RACED
    assert eight.user_attrs["running_estimate"]["stop"] == contender_stop
    # Its partial latency is kept too (the fake server's pace is per request, so it answers
    # about as fast as the incumbent: a figure that depends on the machine's load, not
    # asserted), yet it is never the recommendation: p95 only breaks ties between overlapping
    # throughput intervals.
    assert two.user_attrs["e2e_latency_p95_ms"] > 0
    # The run's lines and `best` count it once, as raced, never as failed or screened out.
    assert "stopped by racing" in err and "failed" not in err.split("trials:")[-1]
    assert best.returncode == 0, best_err[-2000:]
    assert json.loads(best_out)["recommended"]["trial"] == eight.number
    counts = json.loads(best_out)["trials"]
    assert (counts["raced"], counts["measured"], counts["failed"]) == (1, 2, 0)
    assert counts["counted"] == counts["total"] == 3
