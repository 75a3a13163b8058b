"""Failures stay contained: a killed worker fails one trial, Ctrl-C stops everything, resume.

Real processes throughout: the worker is killed with SIGKILL as the kernel's OOM killer would,
and Ctrl-C is a real SIGINT to `autotune run`.
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
import psutil
import pytest
from optuna.trial import TrialState
from small_space import LOOP_WORKLOAD, run_study, small_space

from autotune.study.run.loop import FAILURES_IN_A_ROW

pytestmark = pytest.mark.slow


def start_run(space: Path, db: Path, trials: int, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autotune.cli",
            "run",
            "--space",
            str(space),
            "--trials",
            str(trials),
            "--study",
            "s",
            "--storage",
            f"sqlite:///{db}",
        ],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def workers_of(run: subprocess.Popen[str]) -> list[psutil.Process]:
    """Worker processes started by this `autotune run` (other tests may run their own)."""
    try:
        children = psutil.Process(run.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for proc in children:
        try:
            cmdline = proc.cmdline()
            # The worker itself, not the guard that runs it (autotune.engines.guard).
            if (
                "autotune.engines.inprocess.worker" in cmdline
                and "autotune.engines.guard" not in cmdline
            ):
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def wait_for_new_worker(
    run: subprocess.Popen[str], seen: set[int], timeout_s: float = 240
) -> psutil.Process:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in workers_of(run):
            if proc.pid not in seen:
                return proc
        time.sleep(0.2)
    raise AssertionError("no worker process appeared")


def wait_for_a_measuring_trial(db: Path, timeout_s: float = 240) -> int:
    """Until a trial after the reference shows a running estimate: its load test is under way
    (read from the database as it runs). Its number."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if db.exists():
            with contextlib.suppress(Exception):  # the study may not be created yet
                study = optuna.load_study(study_name="s", storage=f"sqlite:///{db}")
                for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                    if trial.number >= 1 and "running_estimate" in trial.user_attrs:
                        return trial.number
        time.sleep(0.2)
    raise AssertionError("no trial after the reference began its load test")


def test_killed_worker_fails_one_trial_and_the_study_goes_on(tmp_path: Path) -> None:
    # Every load test runs to its 15 s cap (a target no interval meets, no racing), so the kill
    # below lands inside the first measured trial after the reference (trial 1, or 2 when 1
    # repeats the reference's configuration) on a busy machine too: it is sent once that
    # trial's first running estimate is in the database, not after a pause.
    workload = {**LOOP_WORKLOAD, "max_measure_s": 15, "target_ci_rel": 1e-6, "racing": False}
    space = small_space(tmp_path, params={"batch_size": {"choices": [1, 2]}}, workload=workload)
    db = tmp_path / "s.db"
    run = start_run(space, db, 3, tmp_path)
    worker = wait_for_new_worker(run, set())
    # Trial 1 shares the reference's launch: the same worker measures it. Kill it mid-trial.
    killed = wait_for_a_measuring_trial(db)
    worker.send_signal(signal.SIGKILL)
    _, stderr = run.communicate(timeout=900)
    assert run.returncode == 0, stderr[-2000:]
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{db}")
    measured = [t for t in study.trials if "duplicate_of" not in t.user_attrs]
    assert [t.state for t in measured] == [
        TrialState.COMPLETE,
        TrialState.FAIL,
        TrialState.COMPLETE,
    ]
    failed = measured[1]
    assert failed.number == killed
    assert failed.user_attrs["failure_kind"] == "crash"
    assert "signal 9" in failed.user_attrs["failure_reason"]
    assert failed.user_attrs["launch_id"] == measured[0].user_attrs["launch_id"]
    # The next trial needed a new launch: a new worker, not the dead one.
    assert measured[2].user_attrs["launch_started"] is True
    assert measured[2].user_attrs["environment"]["worker_pid"] != str(worker.pid)
    assert not psutil.pid_exists(worker.pid)


def test_ctrl_c_stops_the_worker_and_resume_finishes(tmp_path: Path) -> None:
    space = small_space(tmp_path)
    db = tmp_path / "s.db"
    run = start_run(space, db, 2, tmp_path)
    worker = wait_for_new_worker(run, set())
    time.sleep(1.0)
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 130
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert not psutil.pid_exists(worker.pid) or worker.status() == psutil.STATUS_ZOMBIE
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{db}")
    assert [t.state for t in study.trials] == [TrialState.FAIL]  # nothing left RUNNING
    interrupted = study.trials[0].user_attrs
    assert interrupted["failure_kind"] == "interrupted"
    assert "Ctrl-C" in interrupted["failure_reason"]

    resumed = start_run(space, db, 3, tmp_path)
    _, stderr = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, stderr[-2000:]
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{db}")
    measured = [t for t in study.trials[1:] if "duplicate_of" not in t.user_attrs]
    # --trials 3 asks for three measured trials: the interrupted one does not count.
    assert [t.state for t in measured] == [TrialState.COMPLETE] * 3
    assert "[3/3]" in stderr
    # The interrupted reference was enqueued again and completed first after the resume.
    assert study.trials[1].user_attrs.get("is_reference") is True
    assert os.path.exists(db)


def test_every_trial_timing_out_is_reported_per_trial(tmp_path: Path) -> None:
    space = small_space(
        tmp_path,
        trials=2,
        trial_timeout_s=1,  # no worker can even import torch in a second
        # The load test's caps below the timeout, as a space must have them.
        workload={**LOOP_WORKLOAD, "max_measure_s": 0.5, "max_warmup_s": 0.3},
        constraints={"accuracy": {"mode": "absolute", "min": 0.0}},
        params={"batch_size": {"choices": [1, 2]}},
    )
    result, _ = run_study(space, study="s", cwd=tmp_path)
    assert result.returncode == 1
    assert "no trial completed" in result.stdout
    # Failures do not count towards --trials: the study stops after FAILURES_IN_A_ROW of them.
    assert result.stdout.count("FAIL: timed out after 1 s") == FAILURES_IN_A_ROW
    assert f"{FAILURES_IN_A_ROW} trials failed in a row" in result.stderr
    assert "Traceback" not in result.stderr
