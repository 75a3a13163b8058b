"""The replay benchmark (the study loop on the H200's response surface, bench/cpu/replay.py)
runs in a reduced setting, as CI can."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autotune.engines.session import measure_plan
from autotune.params import TrialConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("budget", ["1e9", "20000"])
def test_a_budget_past_a_studys_longest_is_one_line(budget: str) -> None:
    """It ended in a SpaceError traceback from the replayed study's space file."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "cpu" / "replay.py"), "--budget-min", budget],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "error:" in line and "43200 minutes" in line and budget in line


@pytest.mark.slow
def test_the_replay_benchmark_runs_the_study_loop_in_a_reduced_setting(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "cpu" / "replay.py"), "--seeds", "1",
         "--budget-min", "20", "--random-budget-min", "20", "--grid-seeds", "0",
         "--methods", "study,random", "--out", str(tmp_path), "--name", "r"],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    runs = {run["method"]: run for run in saved["runs"]}
    assert set(runs) == {"study", "random"}
    for run in runs.values():
        assert run["trials"] >= 5, run
        times = [point["t_s"] for point in run["curve"]]
        assert times == sorted(times) and times[-1] <= 20 * 60 + 300  # one trial past at most
        assert all(0.0 <= point["share"] <= 1.0 for point in run["curve"])
        # Both measure the reference and a named candidate first (random search both).
        assert 0 < run["prefix_s"] < times[-1]
        # The candidate's server started while the reference measured (60 s of start-up on
        # the surface, all of it hidden behind the reference's 80-odd s); both records say so.
        reference, candidate = run["proposals"][:2]
        assert reference["candidate"] is None and "measured_beside" in reference["beside"]
        assert candidate["launch_startup_s"] == 60.0 and "startup_beside" in candidate["beside"]
        assert candidate["startup_waited_s"] < candidate["launch_startup_s"]
    # Racing stopped losers in the study, and never one that was as good as its rival.
    assert runs["study"]["raced"] >= 1 and runs["study"]["racing_errors"] == []
    assert runs["random"]["raced"] == 0  # random search runs with racing off
    assert all(p["step"] is None for p in runs["random"]["proposals"])
    # The study's first proposals are one-lever steps from the incumbent: request-time levels
    # on the incumbent's launch first, then launches with one launch lever changed and the
    # incumbent's request-time levels.
    proposals = {p["trial"]: p for p in runs["study"]["proposals"]}
    steps = [p for p in proposals.values() if p["step"] is not None]
    # The steps start as soon as the first named candidate has a figure; the second waits
    # until a step has beaten the first (or the steps leave its launch), and is raced then.
    assert steps and steps[0]["trial"] == 2, steps[:2]
    second = next(p for p in proposals.values() if p["candidate"] and p["trial"] > 1)
    assert any(p["step"] and p["trial"] < second["trial"] for p in proposals.values())
    assert second["raced_by"] is not None, second  # as fast as the first: far below the best
    for proposal in steps:
        base = proposals[proposal["step"]["from_trial"]]["levers"]
        changed = {k for k, v in proposal["levers"].items() if v != base[k]}
        assert changed == {proposal["step"]["lever"]}, (proposal, base)
        assert proposal["levers"][proposal["step"]["lever"]] == proposal["step"]["value"]
    # The far end of each lever first: from 64 in flight at full size, 1 in flight and 512 px.
    firsts = {(p["step"]["lever"], p["step"]["value"]) for p in steps[:2]}
    assert firsts == {("batch_size", 1), ("image_max_side", 512)}, steps[:2]
    levers = [p["step"]["lever"] for p in steps]
    first_launch_step = next(
        i for i, lever in enumerate(levers) if lever not in ("image_max_side", "batch_size")
    )
    assert set(levers[:first_launch_step]) == {"image_max_side", "batch_size"}
    # A step launch that lost its races (eager mode, four times slower) is left at once.
    launches = runs["study"]["launches"]
    eager = [launch for launch in launches if launch["compile_mode"] == "none"]
    assert all(launch["trials"] <= 2 for launch in eager), launches
    assert (tmp_path / "r.md").read_text(encoding="utf-8").startswith("# Replay")


def test_the_replay_session_measures_through_the_phases_every_engine_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay's session runs autotune.engines.phases.run_phases on its simulated driver:
    the phases a server shows, a load the rule stopped and whose requests drained, and the
    floor the one monitor works out (the later of the turnover and the warm-up requests)."""
    monkeypatch.syspath_prepend(str(REPO / "bench" / "cpu"))
    replay = importlib.import_module("replay")
    replay_engine = importlib.import_module("replay_engine")
    space = replay.replay_space(tmp_path, budget_s=1800, seed=0, method="random")
    point = next(p for p in replay.surface.grid_points() if p["batch_size"] == 16)
    config = TrialConfig(**point, max_new_tokens=128)
    clock = replay_engine.SimClock()
    session = replay_engine.ReplaySession(config, clock, np.random.default_rng(0))
    up_at, phases = clock.now, []
    plan = measure_plan(space, config, accuracy_ids=None)
    result = session.measure(config, plan, on_phase=phases.append)
    assert phases == ["load test"] and result.stop_reason and not result.predictions
    ends = [t.end for t in result.timings]
    assert ends == sorted(ends) and result.load_s == ends[-1] > result.load_stop  # drained
    # As many requests as lanes ended: the surface's first round turned over.
    assert result.min_warmup_s == max(ends[16 - 1], ends[plan.warmup_requests - 1])
    assert result.stop_rule_trail[-1]["stop"] == result.stop_reason
    assert clock.now == pytest.approx(up_at + result.load_s + replay_engine.RECORDING_S)


# The replay's engine, with every fp16 launch failing to start (an engine that cannot run a
# dtype, a start-up that runs out of memory): run in its own process, since this test replaces
# the replay engine's session class for its run.
_FAILING_FP16 = """
import json, sys
sys.path.insert(0, "bench/cpu")
import replay, replay_engine
from autotune.errors import TrialFailure

class FailingFp16(replay_engine.ReplaySession):
    def __init__(self, launch, clock, rng, **options):
        if launch.dtype == "float16":
            clock.advance(30.0)
            raise TrialFailure("fp16 launch cannot start", kind="startup")
        super().__init__(launch, clock, rng, **options)

replay_engine.ReplaySession = FailingFp16
print(json.dumps(replay.run_one("study", 2, 1800.0)))
"""


@pytest.mark.slow
def test_a_launch_that_fails_to_start_is_not_proposed_until_the_study_stops() -> None:
    """A failed start leaves no launch id. The launch step must still count it as run, or it
    pins the same launch again; and the trial is PRUNED for the sampler, which learns nothing
    from a failure, so TPE does not propose fp16 until five failures in a row end the study
    (seed 2 stopped at 25 trials that way)."""
    done = subprocess.run(
        [sys.executable, "-c", _FAILING_FP16], capture_output=True, text=True, timeout=600,
        cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout.strip().splitlines()[-1])
    levers = ("compile_mode", "kv_cache_fraction", "dtype")
    failed = {f["trial"]: tuple(f["config"][lever] for lever in levers) for f in run["failed"]}
    assert failed and all(launch[2] == "float16" for launch in failed.values()), failed
    # The steps never try a failed launch again: its launch step counts as run. The sampler
    # may (its failures are infeasible to TPE, which samples less near them, not never).
    stepped = [failed[p["trial"]] for p in run["proposals"] if p["step"] and p["trial"] in failed]
    assert stepped and len(stepped) == len(set(stepped)), (stepped, failed)
    assert len(failed) <= len(run["proposals"]) // 4, failed
    # The study ran to its budget, not to five failures in a row, and found the best region.
    spent = run["curve"][-1]["t_s"]
    assert spent >= 1800 - 300 and run["final_share"] >= 0.95, (spent, run["trials"], failed)
