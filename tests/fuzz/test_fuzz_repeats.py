"""Bad input, stored attributes: `duplicate_of`, `raced_by` and `step` shaped by hand, from a
fixed seed.

A `duplicate_of` is only what it claims when it names an earlier completed trial with the same
configuration; any other (the trial itself, a missing or later trial, -1, a failed or pruned
one, another configuration, a cycle) is named in one line, and the trial is ranked on its own
figures, so the recommendation is the one of the study without the forged attribute. A
`raced_by` or `step` of the right type changes no ranking. Each case reads the study the way
`best` and `report` do, in this process, from an in-memory copy of the small study.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState
from study_factory import SPECS, Spec, _p, build_study
from test_fuzz_stored import json_value, unexpected

from autotune.errors import AutotuneError
from autotune.records.repeats import impossible_repeats
from autotune.records.stored import TrialRecord
from autotune.report.text import best_json, best_text
from autotune.study.results.select import recommend

SEED = 6
CASES = 160
RECOMMENDED = 2  # the small study's recommendation (tests/study_factory.py)
# The small study and a true repeat of trial 2 (its configuration proposed again, as trial 8).
REPEAT = Spec(_p("sdpa", 768, 16), 305.5, 4200, 0.88, duplicate_of=2)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[FrozenTrial]]:
    url, name = build_study(tmp_path_factory.mktemp("repeats"), specs=[*SPECS, REPEAT])
    study = optuna.load_study(study_name=name, storage=url)
    return dict(study.user_attrs), study.get_trials()


def study_with(
    base: tuple[dict[str, Any], list[FrozenTrial]], changes: dict[int, dict[str, Any]]
) -> optuna.Study:
    """An in-memory copy of the base study, with `changes` to trials' user attributes."""
    attrs, trials = base
    study = optuna.create_study(directions=["maximize", "minimize"])
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    copies = []
    for trial in trials:
        changed = copy.deepcopy(trial)
        changed.user_attrs.update(changes.get(trial.number, {}))
        copies.append(changed)
    study.add_trials(copies)
    return study


def forged_repeat(rng: random.Random, complete: list[int], count: int) -> tuple[dict, bool]:
    """Changes giving one or two completed trials a duplicate_of; whether each claim holds."""
    trial = rng.choice(complete)
    kind = rng.randrange(8)
    if kind == 0:
        return {trial: {"duplicate_of": trial}}, False
    if kind == 1:
        return {trial: {"duplicate_of": rng.choice([-1, -5, -(2**31)])}}, False
    if kind == 2:
        return {trial: {"duplicate_of": rng.choice([count, count + 7, 2**31 - 1])}}, False
    if kind == 3:
        later = list(range(trial + 1, count))
        return {trial: {"duplicate_of": rng.choice(later or [count])}}, False
    if kind == 4:
        return {trial: {"duplicate_of": rng.choice([6, 7])}}, False  # a FAIL, a PRUNED trial
    if kind == 5:
        other = rng.choice([n for n in complete if n != trial])
        return {trial: {"duplicate_of": other}, other: {"duplicate_of": trial}}, False  # a cycle
    if kind == 6:
        earlier = [n for n in complete if n < trial]
        if not earlier:
            return {trial: {"duplicate_of": trial}}, False
        twin = rng.choice(earlier)
        return {trial: {"duplicate_of": twin}}, (trial, twin) == (8, 2)
    return {8: {"duplicate_of": 2}}, True  # the true repeat, as stored


@pytest.mark.slow
def test_impossible_duplicates_are_named_and_change_no_recommendation(
    base: tuple[dict[str, Any], list[FrozenTrial]],
) -> None:
    rng = random.Random(SEED)
    trials = base[1]
    complete = [t.number for t in trials if t.state == TrialState.COMPLETE]
    failures = []
    named = 0
    for case in range(CASES):
        changes, holds = forged_repeat(rng, complete, len(trials))
        what = f"case {case}: {changes}"
        study = study_with(base, changes)
        try:
            recommended = recommend(study).trial.number
            lines = impossible_repeats(study.get_trials(deepcopy=False))
            shown = best_text(study)
            best_json(study)
        except Exception as exc:
            failures.append(f"{what}: {unexpected(exc)}")
            continue
        problems = []
        if recommended != RECOMMENDED:
            problems.append(f"recommended trial {recommended}")
        if f"recommended: trial {RECOMMENDED}" not in shown:
            problems.append("best does not recommend it")
        forged = {n for n, c in changes.items() if c["duplicate_of"] != 2 or n != 8}
        for number in forged:
            if not holds and not any(line.startswith(f"trial {number}: ") for line in lines):
                problems.append(f"trial {number}'s duplicate_of is not named: {lines}")
        if holds and lines:
            problems.append(f"a true repeat named impossible: {lines}")
        problems += [f"a line of {len(x.splitlines())} lines" for x in lines if "\n" in x]
        named += bool(lines)
        if problems:
            failures.append(f"{what}: {'; '.join(problems)}")
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])
    assert named >= CASES // 2, named


@pytest.mark.parametrize("seed", range(4))
def test_stored_race_and_step_attributes_of_any_shape_change_no_ranking(
    base: tuple[dict[str, Any], list[FrozenTrial]], seed: int
) -> None:
    """A readable `raced_by` or `step` on any trial leaves the recommendation as it was; an
    unreadable one ends in one StudyError line (the storages show such a trial as a stand-in:
    tests/fuzz/test_fuzz_stored.py)."""
    rng = random.Random(SEED * 100 + seed)
    trials = base[1]
    failures = []
    for _ in range(CASES // 4):
        number = rng.randrange(len(trials))
        key = rng.choice(["raced_by", "step", "raced_reason", "duplicate_of"])
        value = rng.choice([json_value(rng), rng.randrange(-3, 12), None, {"lever": "x"}])
        changes = {number: {key: value}}
        study = study_with(base, changes)
        readable = TrialRecord.problem({**trials[number].user_attrs, key: value}) is None
        try:
            recommended = recommend(study).trial.number
            best_text(study)
        except AutotuneError as exc:
            if readable or "\n" in str(exc):
                failures.append(f"{changes}: {unexpected(exc)}")
            continue
        except Exception as exc:
            failures.append(f"{changes}: {unexpected(exc)}")
            continue
        if readable and recommended != RECOMMENDED:
            failures.append(f"{changes}: recommended trial {recommended}")
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])


def test_the_true_repeat_is_still_a_repeat(
    base: tuple[dict[str, Any], list[FrozenTrial]], tmp_path: Path
) -> None:
    study = study_with(base, {})
    assert impossible_repeats(study.get_trials(deepcopy=False)) == []
    assert "impossible" not in best_text(study)
    assert best_json(study)["impossible_repeats"] == []
