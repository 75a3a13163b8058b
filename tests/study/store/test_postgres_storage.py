"""Studies in a real PostgreSQL server: two processes share one study, as two machines would."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import postgres_server
import pytest
from optuna.trial import TrialState
from small_space import small_space

from autotune.study.store.storage import failure_of

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not postgres_server.available(), reason="PostgreSQL server not installed"),
]


def load_and_close(url: str, name: str) -> optuna.Study:
    """The study, read through a storage whose connections are closed at once: a psycopg
    connection left to the garbage collector warns in whichever later test collects it."""
    storage = optuna.storages.RDBStorage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        # A copy in memory: the trials read now stay readable after the connections close.
        copy = optuna.create_study(study_name=name, directions=study.directions)
        copy.add_trials(study.get_trials(deepcopy=False))
        for key, value in study.user_attrs.items():
            copy.set_user_attr(key, value)
        return copy
    finally:
        storage.engine.dispose()


def autotune(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_share_one_study(tmp_path: Path) -> None:
    space = small_space(tmp_path, params={"batch_size": {"choices": [1, 2, 4]}})
    with postgres_server.postgres() as url:
        # One compute thread per process: two engines at once would otherwise run four
        # spinning threads on a 2-core machine (slower by far; no figure is compared here).
        threads = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        runs = [
            autotune(
                "run",
                "--space",
                str(space),
                "--study",
                "shared",
                "--storage",
                url,
                "--trials",
                "3",
                "--quiet",
                cwd=tmp_path,
                env=threads,
            )
            for _ in range(2)
        ]
        for run in runs:
            _, stderr = run.communicate(timeout=900)
            assert run.returncode == 0, stderr[-2000:]
        study = load_and_close(url, "shared")
        complete = study.get_trials(states=(TrialState.COMPLETE,))
        # The two processes stop together at the target: a trial asked for at the same
        # moment as the last one needed steps back ("surplus") instead of overshooting.
        measured = [
            t
            for t in study.trials
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            and "duplicate_of" not in t.user_attrs
            and "failure_kind" not in t.user_attrs
        ]
        assert len(measured) == 3
        others = [t for t in study.trials if t not in measured]
        assert all(
            "duplicate_of" in t.user_attrs or t.user_attrs.get("failure_kind") == "surplus"
            for t in others
        ), [t.user_attrs.get("failure_reason") for t in others]
        assert len(complete) >= 3
        references = [t for t in complete if t.user_attrs.get("is_reference")]
        assert references, "the reference ran"
        # Every candidate was judged against a completed reference, never passed unjudged.
        for trial in complete:
            if not trial.user_attrs.get("is_reference"):
                assert "paired_vs_reference" in trial.user_attrs

        best = subprocess.run(
            [sys.executable, "-m", "autotune.cli", "best", "--study", "shared", "--storage", url],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert best.returncode == 0, best.stderr
        assert "recommended: trial" in best.stdout


def test_missing_study_in_postgres_is_one_line(tmp_path: Path) -> None:
    with postgres_server.postgres() as url:
        result = subprocess.run(
            [sys.executable, "-m", "autotune.cli", "best", "--study", "nope", "--storage", url],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error: no study 'nope'")
    assert "Traceback" not in result.stderr


def test_a_host_that_stops_has_its_running_trial_failed_by_the_heartbeat(tmp_path: Path) -> None:
    """Two hosts on one PostgreSQL study: host A is killed mid-trial; host B's run fails that
    trial through Optuna's heartbeat (A's pid means nothing on B) and finishes the study."""
    space = small_space(tmp_path, params={"batch_size": {"choices": [1, 2, 4]}})
    grace = {"AUTOTUNE_HEARTBEAT_GRACE_S": "4"}
    with postgres_server.postgres() as url:
        args = ("run", "--space", str(space), "--study", "hosts", "--storage", url)
        host_a = autotune(*args, "--trials", "3", cwd=tmp_path, env={"AUTOTUNE_HOST": "a", **grace})
        victim = None
        deadline = time.monotonic() + 300
        while victim is None and time.monotonic() < deadline and host_a.poll() is None:
            time.sleep(0.5)
            try:
                study = load_and_close(url, "hosts")
            except KeyError:  # not created yet
                continue
            running = study.get_trials(states=(TrialState.RUNNING,))
            victim = running[0] if running else None
        assert victim is not None, "host A never ran a trial"
        host_a.kill()
        host_a.communicate(timeout=60)
        time.sleep(5)  # past the grace period
        host_b = autotune(*args, "--trials", "3", cwd=tmp_path, env={"AUTOTUNE_HOST": "b", **grace})
        _, stderr = host_b.communicate(timeout=900)
        assert host_b.returncode == 0, stderr[-2000:]
        study = load_and_close(url, "hosts")
        lost = study.trials[victim.number]
        assert lost.state == TrialState.FAIL
        # Optuna's heartbeat failed it; its failed-trial callback recorded why.
        why = failure_of(study, lost)
        assert why.failure_kind == "lost"
        assert "stopped sending heartbeats" in str(why.failure_reason)
        out = str(tmp_path / "r.html")
        report = subprocess.run(
            [
                sys.executable,
                "-m",
                "autotune.cli",
                "report",
                "--study",
                "hosts",
                "--storage",
                url,
                "--out",
                out,
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert report.returncode == 0, report.stderr
        assert "stopped sending heartbeats" in (tmp_path / "r.html").read_text()
        assert not study.get_trials(states=(TrialState.RUNNING,))
        measured = [
            t
            for t in study.trials
            if t.state == TrialState.COMPLETE and "failure_kind" not in t.user_attrs
        ]
        assert len(measured) >= 3
        assert {t.user_attrs["owner"]["host"] for t in measured} >= {"b"}
