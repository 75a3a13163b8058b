"""Studies in a real PostgreSQL server: two processes share one study, as two machines would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import postgres_server
import pytest
from optuna.trial import TrialState
from small_space import small_space

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not postgres_server.available(), reason="PostgreSQL server not installed"),
]


def autotune(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_share_one_study(tmp_path: Path) -> None:
    space = small_space(tmp_path, params={"batch_size": {"choices": [1, 2, 4]}})
    with postgres_server.postgres() as url:
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
            )
            for _ in range(2)
        ]
        for run in runs:
            _, stderr = run.communicate(timeout=900)
            assert run.returncode == 0, stderr[-2000:]
        study = optuna.load_study(study_name="shared", storage=url)
        complete = study.get_trials(states=(TrialState.COMPLETE,))
        # The two processes stop together at the target (a trial already started may finish).
        assert 3 <= len(study.trials) <= 4
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
