"""An in-process trial's `swift deploy` export answers as the trial did, item by item.

This is the condition under which autotune counts an in-process transformers trial as
deployable through ms-swift (autotune.export.reproduce): a real smoke study runs in-process,
then the command `autotune export` prints is launched as printed (only host and port
changed) and queried with the official `openai` client, sending the request fields and the
client-side resize the export's notes ask for.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from small_space import autotune_cli, small_evalset, small_space
from swift_replay import check_answers

from autotune.evalset.dataset import load_evalset

pytest.importorskip("openai")
pytestmark = [pytest.mark.slow, pytest.mark.swift]


@pytest.fixture(scope="module")
def reproduce_study(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, list[optuna.trial.FrozenTrial]], dict[int, dict[str, object]]]:
    """A smoke study in-process, and each trial's export: (folder, trials by command,
    exports by trial number)."""
    tmp_path = tmp_path_factory.mktemp("reproduce")
    space = small_space(
        tmp_path,
        name="reproduce",
        # 16 of the smoke set's 80 items: enough to compare answers item by item.
        evalset=str(small_evalset(tmp_path, n_text=12, n_shapes=4)),
        trials=4,
        params={
            "image_max_side": {"choices": [None, 128, 64]},
            "batch_size": {"choices": [1, 4]},
        },
        sampler={"n_startup_trials": 4},
    )
    db = tmp_path / "reproduce.db"
    storage = f"sqlite:///{db}"
    ran = autotune_cli(
        "run", "--space", str(space), "--study", "reproduce", "--storage", storage, cwd=tmp_path
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    study = optuna.load_study(study_name="reproduce", storage=storage)
    trials = [
        t
        for t in study.get_trials(states=(TrialState.COMPLETE,))
        if "duplicate_of" not in t.user_attrs
    ]
    sides = {t.user_attrs["config"]["image_max_side"] for t in trials}
    assert len(sides) >= 2, sides  # more than one image size, so resizing is exercised

    exports = {}
    for trial in trials:
        assert trial.user_attrs["deployable"] is True, trial.user_attrs["deployability"]
        out = autotune_cli(
            "export", "--study", "reproduce", "--storage", storage,
            "--trial", str(trial.number), "--json", cwd=tmp_path,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        exports[trial.number] = json.loads(out.stdout)
    # The static batch of an in-process trial becomes the server's --max_batch_size; the
    # image size and the decoding are request-time, so trials share a command otherwise.
    by_command: dict[str, list[optuna.trial.FrozenTrial]] = {}
    for trial in trials:
        by_command.setdefault(exports[trial.number]["command"], []).append(trial)
    return tmp_path, by_command, exports


@pytest.mark.parametrize("batch_size", [1, 4])
def test_swift_export_of_in_process_trials_gives_the_same_answers(
    reproduce_study: tuple[
        Path, dict[str, list[optuna.trial.FrozenTrial]], dict[int, dict[str, object]]
    ],
    batch_size: int,
) -> None:
    """One `swift deploy` per static batch (its --max_batch_size), launched as exported."""
    tmp_path, by_command, exports = reproduce_study
    served = {
        command: group
        for command, group in by_command.items()
        if group[0].user_attrs["config"]["batch_size"] == batch_size
    }
    assert len(served) == 1, list(by_command)  # the seeded study measures both batches
    command, group = next(iter(served.items()))
    assert "IMAGE_MIN_TOKEN_NUM=1" in command  # the reader's processor: 1 token at least
    check_answers(command, group, exports, load_evalset(str(tmp_path / "evalset")), tmp_path)
