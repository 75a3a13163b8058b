"""A study knows its machine (issue 56): its trials record the GPU kind, host CPU and engine
versions that measured them, and a resume on another machine is refused by name, or, with
--allow-other-machine, becomes a comparison group of its own, ranked and raced apart.

The study is made by the real command line on a copy of the smoke space (the bundled tiny
model, measured in-process); its records are then rewritten with sqlite3 as a study measured
on another machine would read, and resumed by the real command line.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import optuna
import pytest
from small_space import autotune_cli, small_space

from autotune.space import load_space
from autotune.study.results.groups import group_of, in_group
from autotune.study.results.select import front_top, reference_trial
from autotune.study.run.racing import incumbent

PARAMS = {"batch_size": {"choices": [1, 2, 4]}}
OTHER_GROUP = "another-machine"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rewrite_machines(db: Path, change: dict[str, Any]) -> None:
    """Every trial's machine as another machine's run would have written it."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT trial_id, value_json FROM trial_user_attributes WHERE key = 'machine'"
        ).fetchall()
        assert rows, "the trials recorded no machine"
        for trial_id, value in rows:
            machine = json.loads(value)
            for name, now in change.items():
                if name == "versions":
                    machine["versions"] = {**machine["versions"], **now}
                else:
                    machine[name] = now
            machine["group"] = OTHER_GROUP
            connection.execute(
                "UPDATE trial_user_attributes SET value_json = ? "
                "WHERE trial_id = ? AND key = 'machine'",
                (json.dumps(machine), trial_id),
            )


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A two-trial study made by `autotune run` (its space, its database)."""
    folder = tmp_path_factory.mktemp("made")
    space = small_space(folder, name="m", params=PARAMS)
    db = folder / "m.db"
    ran = autotune_cli(
        "run", "--space", str(space), "--study", "m", "--storage", f"sqlite:///{db}",
        "--trials", "2", "--quiet", cwd=folder,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    return space, db


CHANGES = [
    ("gpu", {"gpu": "NVIDIA H100 80GB HBM3"}, "NVIDIA H100 80GB HBM3"),
    ("cpu", {"cpu": "Intel(R) Xeon(R) Platinum 8480+"}, "Intel(R) Xeon(R) Platinum 8480+"),
    ("engine", {"versions": {"transformers": "4.0.0"}}, "transformers 4.0.0"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "change", "words"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_resume_on_another_machine_is_refused_by_name_and_writes_nothing(
    made: tuple[Path, Path], tmp_path: Path, name: str, change: dict[str, Any], words: str
) -> None:
    space, made_db = made
    db = Path(shutil.copy(made_db, tmp_path / "m.db"))
    rewrite_machines(db, change)
    before = digest(db)
    ran = autotune_cli(
        "run", "--space", str(space), "--study", "m", "--storage", f"sqlite:///{db}",
        "--trials", "3", cwd=tmp_path,
    )  # fmt: skip
    lines = ran.stderr.strip().splitlines()
    assert ran.returncode != 0 and len(lines) == 1, ran.stderr[-3000:]
    assert lines[0].startswith("error: study 'm' was measured on "), lines[0]
    assert words in lines[0] and "this machine has " in lines[0], lines[0]
    assert "--allow-other-machine" in lines[0] and "Traceback" not in ran.stderr
    assert digest(db) == before  # nothing written


@pytest.mark.slow
def test_with_the_flag_the_new_trials_form_their_own_group_ranked_and_raced_apart(
    made: tuple[Path, Path], tmp_path: Path
) -> None:
    space, made_db = made
    db = Path(shutil.copy(made_db, tmp_path / "m.db"))
    rewrite_machines(db, {"gpu": "NVIDIA H100 80GB HBM3"})
    url = f"sqlite:///{db}"
    ran = autotune_cli(
        "run", "--space", str(space), "--study", "m", "--storage", url, "--trials", "5",
        "--quiet", "--allow-other-machine", cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "comparison group: ranked the" in ran.stdout, ran.stdout[-2000:]
    study = optuna.load_study(study_name="m", storage=url)
    groups = {t.number: group_of(t) for t in study.trials}
    old = [n for n, g in groups.items() if g == OTHER_GROUP]
    new = [n for n, g in groups.items() if g not in (OTHER_GROUP, None)]
    # Three counted trials more (a repeated proposal, copied from its twin, counts for none).
    assert len(old) == 2 and len(new) >= 3, groups
    assert len({groups[n] for n in new}) == 1
    # Its own reference: measured again on this machine before the group's other trials, so
    # they are judged and shown against a reference of their machine; the old one stays its
    # group's, and neither is read as a second reference (`best` below exits 0).
    own, earlier = reference_trial(study, groups[new[0]]), reference_trial(study, OTHER_GROUP)
    assert own is not None and own.number in new, (groups, own)
    assert earlier is not None and earlier.number in old
    assert all(n > own.number for n in new if n != own.number), (own.number, new)
    # Racing: a stopped trial lost to a trial of its own group, and the incumbent each group
    # races is its own front's top.
    for trial in study.trials:
        raced_by = trial.user_attrs.get("raced_by")
        if raced_by is not None:
            assert groups[raced_by] == groups[trial.number], (trial.number, raced_by)
    loaded = load_space(str(space))
    for group in (OTHER_GROUP, groups[new[0]]):
        top = front_top(in_group(study, group))
        rival = incumbent(study, loaded, launch_id="elsewhere", group=group)
        if rival is not None:
            assert top is not None and rival.number == top.top.number
            assert groups[rival.number] == group
    # `best --json` ranks this machine's group and lists the other one's best apart.
    shown = autotune_cli("best", "--study", "m", "--storage", url, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-2000:]
    data = json.loads(shown.stdout)
    by_group = {g["group"]: g for g in data["comparison_groups"]}
    assert set(by_group) == {OTHER_GROUP, groups[new[0]]}
    assert by_group[groups[new[0]]]["ranked"] and by_group[groups[new[0]]]["this_machine"]
    assert not by_group[OTHER_GROUP]["ranked"] and not by_group[OTHER_GROUP]["this_machine"]
    assert by_group[OTHER_GROUP]["machine"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert by_group[OTHER_GROUP]["best_trial"] in old
    assert data["unreadable"] == {}
    if data["recommended"] is not None:
        assert data["recommended"]["trial"] in new
        if data["recommended"]["trial"] != own.number:  # "x the reference": its own
            base = data["versus_reference"]["reference_tokens_per_s"]
            assert base == own.user_attrs["throughput_output_tokens_per_s"]
    # A second resume on this machine joins its group without the flag.
    again = autotune_cli(
        "run", "--space", str(space), "--study", "m", "--storage", url, "--trials", "6",
        "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    study = optuna.load_study(study_name="m", storage=url)
    assert {group_of(t) for t in study.trials} == {OTHER_GROUP, groups[new[0]]}
