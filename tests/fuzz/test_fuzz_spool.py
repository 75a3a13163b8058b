"""Bad input, the spool: folders and files anyone who can write the temporary folder may have
shaped, and payloads that are not this study's measurements, generated from a fixed seed.

Each case goes through the real recovery (autotune.study.store.recovery.recover, which `autotune
run` calls before its first trial) in this process, under a private temporary folder. A
measurement is recorded only when its folders are this user's and nobody else can write them,
its file is a regular file of this user under the size bound, and it matches a trial this
study started (number, start, configuration); everything else is refused in single lines,
records nothing and ends in time (a FIFO never blocks, /dev/zero is never read whole).
"""

from __future__ import annotations

import json
import math
import os
import random
import stat
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from test_fuzz_inputs import CASE_TIMEOUT_S, deadline
from test_fuzz_stored import json_value, unexpected

from autotune.study.store.recovery import Spool, recover, spool_payload
from autotune.study.store.spool import SPOOL_FILE_MAX_BYTES

SEED = 5
FOLDER_CASES = 120
PAYLOAD_CASES = 200
OTHER_UID = 12345
SPACE = {"x": FloatDistribution(0.0, 1.0), "batch_size": CategoricalDistribution([1, 4, 16])}
CONFIG = {"backend": "transformers", "batch_size": 4}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root")


@pytest.fixture
def private_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


class Scene:
    """An in-memory study with a started trial per case, and its spool (named by a URL)."""

    def __init__(self, root: Path, name: str) -> None:
        self.study = optuna.create_study(study_name=name, directions=["maximize", "minimize"])
        (root / "studies").mkdir(exist_ok=True)
        self.spool = Spool(f"sqlite:///{root}/studies/{name}.db", name)

    def started_trial(self) -> tuple[optuna.Trial, dict[str, Any]]:
        trial = self.study.ask(SPACE)
        trial.set_user_attr("config", CONFIG)  # as the objective does before measuring
        payload = spool_payload(trial, [120.5, 2400.0], {"config": CONFIG, "accuracy": 0.9})
        return trial, payload

    def count(self) -> int:
        return len(self.study.get_trials(deepcopy=False))

    def recover(self) -> list[str]:
        with deadline(CASE_TIMEOUT_S):
            return recover(self.study, self.spool)

    def end(self, trial: optuna.Trial) -> None:
        if not self.study.get_trials(deepcopy=False)[trial.number].state.is_finished():
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)


def single_lines(notes: list[str]) -> list[str]:
    return [f"a note of {len(n.splitlines())} lines" for n in notes if "\n" in n]


# --- folders ------------------------------------------------------------------------------


def shape_folder(path: Path, rng: random.Random, outside: Path) -> bool:
    """Make `path` one of: a folder (our or another uid, any mode), a symlink to a folder, a
    file, a FIFO. Whether a spool may use it."""
    kind = rng.choice(["folder"] * 6 + ["symlink", "file", "fifo"])
    if kind == "symlink":
        path.symlink_to(outside, target_is_directory=True)
        return False
    if kind == "file":
        path.write_text("{}", encoding="utf-8")
        return False
    if kind == "fifo":
        os.mkfifo(path)
        return False
    path.mkdir()
    uid = rng.choice([0, 0, OTHER_UID])
    mode = rng.choice(
        [0o700, 0o755, 0o750, 0o777, 0o770, 0o707, 0o1777, 0o711, rng.randrange(0o1000)]
    )
    os.chown(path, uid, -1)
    os.chmod(path, mode)
    return uid == os.getuid() and not mode & 0o022


def test_spool_folders_of_every_shape_are_used_only_when_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(SEED)
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    failures = []
    outcomes = {True: 0, False: 0}  # recorded, refused: the cases test both
    for case in range(FOLDER_CASES):
        root = tmp_path / f"case-{case}"
        (root / "tmp").mkdir(parents=True)
        monkeypatch.setattr(tempfile, "tempdir", str(root / "tmp"))  # a temporary folder each
        scene = Scene(root, "s")
        beside, in_temp = scene.spool.folders
        which = rng.choice(["beside", "temp parent", "temp folder"])
        if which == "beside":
            safe, target = shape_folder(beside, rng, outside), beside
        elif which == "temp parent":
            safe, target = shape_folder(in_temp.parent, rng, outside), in_temp
            if in_temp.parent.is_dir() and not in_temp.parent.is_symlink():
                in_temp.mkdir(mode=0o700)
        else:
            in_temp.parent.mkdir(mode=0o700)
            safe, target = shape_folder(in_temp, rng, outside), in_temp
        trial, payload = scene.started_trial()
        placed = target.is_dir() and not target.is_symlink()
        if placed:
            (target / f"trial-{trial.number}.json").write_text(json.dumps(payload), "utf-8")
        what = (
            f"case {case}: {which} {describe(target if which != 'temp parent' else target.parent)}"
        )
        try:
            notes = scene.recover()
        except Exception as exc:
            failures.append(f"{what}: {unexpected(exc)}")
            continue
        problems = single_lines(notes)
        recorded = scene.count() - 1
        outcomes[recorded > 0] += 1
        if safe and placed and recorded != 1:
            problems.append(f"a measurement in a folder of ours was not recorded: {notes}")
        if not safe and recorded:
            problems.append(f"recorded from a folder not ours: {notes}")
        if not safe and placed and not any("is not used" in n for n in notes):
            problems.append(f"refused without a line: {notes}")
        # A new spool write never goes into a folder that is not ours.
        written = scene.spool.write(99, {"number": 99})
        if written is not None and not safe and written.parent == target:
            problems.append(f"wrote {written} into a folder not ours")
        if problems:
            failures.append(f"{what}: {'; '.join(problems)}")
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])
    assert min(outcomes.values()) >= FOLDER_CASES // 5, outcomes


def describe(path: Path) -> str:
    try:
        info = os.lstat(path)
    except OSError:
        return "(absent)"
    return f"{stat.filemode(info.st_mode)} uid {info.st_uid}"


def test_spool_folders_autotune_makes_are_private(tmp_path: Path, private_temp: Path) -> None:
    scene = Scene(tmp_path, "s")
    trial, payload = scene.started_trial()
    old = os.umask(0)  # the most permissive umask: the folders are private all the same
    try:
        path = scene.spool.write(trial.number, payload)
        assert path is not None and path.parent == scene.spool.folders[0]
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        # The folder beside the study made writable by others: not used, the temporary one is.
        os.chmod(scene.spool.folders[0], 0o777)
        path = scene.spool.write(trial.number, payload)
    finally:
        os.umask(old)
    assert path is not None and path.parent == scene.spool.folders[1]
    for folder in (scene.spool.folders[1], scene.spool.folders[1].parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert scene.spool.refused() == [
        f"the spool folder {scene.spool.folders[0]} is not used: its mode is 0777: others can "
        "write to it (chmod 700 it, or remove it)"
    ]


# --- payloads -----------------------------------------------------------------------------


def payload_case(
    rng: random.Random, scene: Scene, trial: optuna.Trial, payload: dict[str, Any]
) -> Iterator[tuple[str, bool | None]]:
    """Shape the spool file of `trial` (in the folder beside the study); yield (what, whether
    it is a measurement of this study to record; None: either, as long as it ends in lines)."""
    folder = scene.spool.folders[0]
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"trial-{trial.number}.json"
    kind = rng.randrange(14)
    changed = json.loads(json.dumps(payload))
    if kind == 0:
        path.write_text(json.dumps(payload), encoding="utf-8")
        yield "the measurement itself", True
    elif kind == 1:
        changed["started"] = None
        path.write_text(json.dumps(changed), encoding="utf-8")
        yield "no start time", False
    elif kind == 2:
        shift = rng.choice([-3600.0, -2.0, -1.0, 1.0, 5.0, 86400.0 * 365])
        start = datetime.fromisoformat(payload["started"]) + timedelta(seconds=shift)
        changed["started"] = start.isoformat()
        path.write_text(json.dumps(changed), encoding="utf-8")
        yield f"started {shift:+} s off", False
    elif kind == 3:
        x = changed["params"]["x"]
        changed["params"]["x"] = 0.25 if x == 0.5 else 1.0 - x
        path.write_text(json.dumps(changed), encoding="utf-8")
        yield "another x", False
    elif kind == 4:
        changed["user_attrs"]["config"] = {**CONFIG, "batch_size": rng.choice([1, 16])}
        path.write_text(json.dumps(changed), encoding="utf-8")
        yield "another configuration", False
    elif kind == 5:
        number = rng.choice([trial.number + 1000, 0 if trial.number else 1])
        changed["number"] = number
        other = folder / f"trial-{number}.json"
        other.write_text(json.dumps(changed), encoding="utf-8")
        yield f"trial {number}, not started now", False
        other.unlink(missing_ok=True)
    elif kind == 6:
        os.mkfifo(path)
        yield "a FIFO", False
    elif kind == 7:
        path.symlink_to(rng.choice(["/dev/zero", "/dev/null", str(folder / "elsewhere.json")]))
        (folder / "elsewhere.json").write_text(json.dumps(payload), encoding="utf-8")
        yield f"a symlink to {os.readlink(path)}", False
        (folder / "elsewhere.json").unlink(missing_ok=True)
    elif kind == 8:
        with path.open("wb") as handle:
            handle.truncate(SPOOL_FILE_MAX_BYTES + rng.choice([1, 1 << 20, 1 << 31]))
        yield "a file over the size bound", False
    elif kind == 9:
        path.write_text(json.dumps(payload), encoding="utf-8")
        os.chown(path, OTHER_UID, -1)
        yield "a file of another user", False
    elif kind == 10:
        path.mkdir()
        yield "a folder", False
    elif kind == 11:
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))))
        yield "random bytes", False
    elif kind == 12:
        changed["values"] = [json_value(rng), json_value(rng)]
        path.write_text(json.dumps(changed), encoding="utf-8")
        finite = all(type(v) in (int, float) and math.isfinite(v) for v in changed["values"])
        # Finite values of this trial are a measurement (whatever they say); others are none.
        yield f"values {json.dumps(changed['values'])[:60]}", None if finite else False
    else:
        key = rng.choice(["duplicate_of", "raced_by", "step", "is_reference", "accuracy"])
        changed["user_attrs"][key] = json_value(rng)
        path.write_text(json.dumps(changed), encoding="utf-8")
        yield f"user_attrs.{key} = {json.dumps(changed['user_attrs'][key])[:60]}", None


def test_spool_payloads_are_recorded_only_as_the_trial_this_study_started(
    tmp_path: Path, private_temp: Path
) -> None:
    rng = random.Random(SEED + 1)
    scene = Scene(tmp_path, "s")
    failures = []
    outcomes = {True: 0, False: 0}  # recorded, refused
    for case in range(PAYLOAD_CASES):
        trial, payload = scene.started_trial()
        for what, expected in payload_case(rng, scene, trial, payload):
            before = scene.count()
            try:
                notes = scene.recover()
            except Exception as exc:
                failures.append(f"case {case}, {what}: {unexpected(exc)}")
                continue
            problems = single_lines(notes)
            recorded = scene.study.get_trials(deepcopy=False)[before:]
            outcomes[bool(recorded)] += 1
            if expected is True and len(recorded) != 1:
                problems.append(f"not recorded: {notes}")
            if expected is False and recorded:
                problems.append("recorded")
            if expected is False and not notes:
                problems.append("refused without a line")
            for added in recorded:
                if added.values != [120.5, 2400.0] or added.params != trial.params:
                    problems.append(f"recorded {added.values} {added.params}")
            if problems:
                failures.append(f"case {case}, {what}: {'; '.join(problems)}")
        scene.end(trial)
        for leftover in scene.spool.folders[0].iterdir():
            if leftover.is_dir() and not leftover.is_symlink():
                leftover.rmdir()
            else:
                leftover.unlink()
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])
    assert min(outcomes.values()) >= PAYLOAD_CASES // 20, outcomes
