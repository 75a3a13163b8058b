"""A rerun picks up where Ctrl-C stopped it, and two runs on one study share one reference.

Real processes throughout: `autotune run` on the smoke space's reference and its two named
candidates, a real SIGINT to its process group (what Ctrl-C in a terminal sends) while the
reference is measuring, then the same command again. Before, each candidate queued before the
re-queued reference waited the trial time-out for it and failed "no completed reference"
(issue 39). bench/cpu/interrupted_rerun.py times the same on the whole smoke study.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import FrozenTrial, TrialState
from small_space import REPO, small_space

from autotune.records.stored import TrialRecord

pytestmark = pytest.mark.slow

SMOKE = yaml.safe_load((REPO / "search_spaces" / "smoke.yaml").read_text(encoding="utf-8"))
NAMES = [c["name"] for c in SMOKE["candidates"]]
# The reference and the smoke space's two named candidates: every trial of the run is one that
# the interruption concerns.
TRIALS = 1 + len(NAMES)
# Without steps, a run queues every named candidate before its first trial (with them, the
# first only: autotune.study.proposals.queueing), as the runs of issue 39 did.
NO_STEPS = {"steps": False}
# A trial may take minutes on two cores shared with other work: the time-out must not end the
# reference before the test interrupts it.
SLACK = {"trial_timeout_s": 3600}


def start(space: Path, db: Path, cwd: Path, log: Path) -> subprocess.Popen[str]:
    """`autotune run` in its own process group, as a shell starts a command."""
    with log.open("w", encoding="utf-8") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "autotune.cli", "run", "--space", str(space),
             "--trials", str(TRIALS), "--study", "s", "--storage", f"sqlite:///{db}"],
            cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip


def load(db: Path) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{db}")


def wait_for_reference(db: Path, run: subprocess.Popen[str], log: Path) -> None:
    """Until the reference is RUNNING on its launch (the engine is up: it measures now)."""
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline:
        assert run.poll() is None, log.read_text(encoding="utf-8")[-3000:]
        with contextlib.suppress(Exception):  # the study may not exist yet
            running = load(db).get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if any(TrialRecord.of(t).is_reference and "launch_id" in t.user_attrs for t in running):
                return
        time.sleep(0.2)
    raise AssertionError("the reference never started measuring")


def references(study: optuna.Study, state: TrialState | None = None) -> list[FrozenTrial]:
    return [
        t
        for t in study.trials
        if TrialRecord.of(t).is_reference and (state is None or t.state == state)
    ]


def finished(run: subprocess.Popen[str], log: Path, timeout_s: float = 1200) -> str:
    run.wait(timeout=timeout_s)
    return log.read_text(encoding="utf-8")


def test_a_rerun_after_ctrl_c_in_the_reference_measures_it_first(tmp_path: Path) -> None:
    space = small_space(tmp_path, candidates=SMOKE["candidates"], sampler=NO_STEPS, **SLACK)
    db = tmp_path / "s.db"
    run = start(space, db, tmp_path, tmp_path / "first.log")
    wait_for_reference(db, run, tmp_path / "first.log")
    os.killpg(run.pid, signal.SIGINT)  # Ctrl-C
    output = finished(run, tmp_path / "first.log")
    assert run.returncode == 130, output[-3000:]
    study = load(db)
    assert [t.state for t in study.trials] == [TrialState.FAIL] + [TrialState.WAITING] * 2
    rerun_from = len(study.trials)

    rerun = start(space, db, tmp_path, tmp_path / "rerun.log")
    output = finished(rerun, tmp_path / "rerun.log")
    assert rerun.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "no completed reference" not in output
    study = load(db)
    started = sorted(
        (t for t in study.trials if t.number >= rerun_from and t.datetime_start is not None),
        key=lambda t: t.datetime_start,  # type: ignore[arg-type, return-value]
    )
    assert TrialRecord.of(started[0]).is_reference, "the rerun measured something else first"
    assert len(references(study, TrialState.COMPLETE)) == 1
    for name in NAMES:
        measured = [t for t in study.trials if TrialRecord.of(t).candidate == name]
        assert [t.state for t in measured] == [TrialState.COMPLETE], name
    assert not [t for t in study.trials if TrialRecord.of(t).failure_kind == "no-reference"]


def test_a_second_run_on_a_study_whose_reference_runs_queues_no_second_one(
    tmp_path: Path,
) -> None:
    """Two `autotune run` on one new SQLite study: the second starts while the first measures
    the reference. Before, it queued a reference of its own, and the study held two."""
    space = small_space(tmp_path, candidates=SMOKE["candidates"], sampler=NO_STEPS, **SLACK)
    db = tmp_path / "s.db"
    first = start(space, db, tmp_path, tmp_path / "first.log")
    wait_for_reference(db, first, tmp_path / "first.log")
    second = start(space, db, tmp_path, tmp_path / "second.log")
    outputs = [finished(first, tmp_path / "first.log"), finished(second, tmp_path / "second.log")]
    assert [first.returncode, second.returncode] == [0, 0], [o[-2000:] for o in outputs]
    study = load(db)
    assert len(references(study)) == 1
    assert len(references(study, TrialState.COMPLETE)) == 1
    for name in NAMES:
        queued = [t for t in study.trials if TrialRecord.of(t).candidate == name]
        assert [t.state for t in queued] == [TrialState.COMPLETE], name
