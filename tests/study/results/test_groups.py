"""Comparison groups (autotune.study.results.groups): a study measured on two machines is
ranked within one group, the other group's best listed apart. A study built as `autotune run`
stores it (tests/study_factory.py), its trials' machines then written by storage, as a run on
each machine writes them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import optuna
from study_factory import build_study

from autotune.records.machine import EARLIER_GROUP, Machine
from autotune.study.results.groups import (
    group_of,
    groups_lines,
    groups_summary,
    in_group,
    ranked_group,
    study_groups,
)
from autotune.study.results.select import recommend

H200 = Machine.grouped(gpu="NVIDIA H200", cpu="Intel Xeon", cores=32, versions={"torch": "2.9"})
H100 = Machine.grouped(
    gpu="NVIDIA H100 80GB HBM3", cpu="AMD EPYC", cores=16, versions={"torch": "2.9"}
)


def two_machine_study(tmp_path: Path) -> optuna.Study:
    """Trials 0-3 (the reference, and the fastest: trial 2) on the H200, 4-7 on the H100."""
    url, name = build_study(tmp_path)
    with sqlite3.connect(tmp_path / f"{name}.db") as connection:
        trials = connection.execute("SELECT trial_id, number FROM trials").fetchall()
        for trial_id, number in trials:
            machine = H200 if number <= 3 else H100
            connection.execute(
                "INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, ?, ?)",
                (trial_id, "machine", json.dumps(machine.written())),
            )
    return optuna.load_study(study_name=name, storage=url)


def test_each_group_is_ranked_alone_and_this_machine_s_is_the_one_best_ranks(
    tmp_path: Path,
) -> None:
    study = two_machine_study(tmp_path)
    assert [g.id for g in study_groups(study)] == [H200.group, H100.group]
    assert recommend(study).trial.number == 2  # the whole study: the H200's figure wins
    on_h100 = in_group(study, H100.group)
    assert {t.number for t in on_h100.trials} == {4, 5, 6, 7}
    assert recommend(on_h100).trial.number == 5  # 126 tok/s, the H100's best
    here = H100.joined("ignored")  # this machine is an H100 (another group id, same machine)
    ranked = ranked_group(study, here)
    assert ranked is not None and ranked.id == H100.group
    lines = groups_lines(study, ranked, here)
    assert "ranked the 4 trials measured on this machine, NVIDIA H100 80GB HBM3" in lines[0]
    assert (
        "NVIDIA H200 (host: Intel Xeon, 32 cores) with torch 2.9: 4 trials, best trial 2"
        in lines[1]
    )
    summary = {g["group"]: g for g in groups_summary(study, ranked, here)}
    assert summary[H100.group]["ranked"] and summary[H100.group]["best_trial"] == 5
    assert not summary[H200.group]["this_machine"] and summary[H200.group]["best_trial"] == 2


def test_a_machine_of_neither_group_ranks_the_one_measured_last_and_one_group_is_the_study(
    tmp_path: Path,
) -> None:
    study = two_machine_study(tmp_path)
    elsewhere = Machine.grouped(gpu="CPU only", cpu="Apple M3", cores=8, versions={})
    ranked = ranked_group(study, elsewhere)
    assert ranked is not None and ranked.id == H100.group  # trial 7 was the last
    assert "the machine measured last" in groups_lines(study, ranked, elsewhere)[0]
    # A study of trials stored before machines were: one group, read from their
    # environments, and the study itself is what every reader ranks.
    url, name = build_study(tmp_path, study_name="old")
    old = optuna.load_study(study_name=name, storage=url)
    assert {group_of(t) for t in old.trials} <= {EARLIER_GROUP, None}
    assert in_group(old, EARLIER_GROUP) is old
    assert study_groups(old)[0].machine.gpu == "NVIDIA H200"
    only = ranked_group(old, elsewhere)
    assert groups_lines(old, only, elsewhere) == [
        "machine: NVIDIA H200 with torch 2.14.1, transformers 5.18.0 (not this machine)"
    ]
