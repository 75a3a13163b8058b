"""Which launch to pay for next, while TPE has too few launches to model them.

TPE proposes launch-time values like any other, but it learns about a launch lever only from
launches that differed in it. A study's first launches all come from the named candidates or
the first proposal; with only those seen, TPE keeps proposing them (on the H200 a 15-minute
study ran 13 proposals on one LMDeploy launch and never tried the other KV share or eager
mode). So the first `launches.random_launches` launches the study chooses itself are steps
from the incumbent instead: its launch with one lever changed, the lever value tried on the
fewest launches first (ties in a seeded order), skipping launches already run. A step that
loses (eager mode, four times slower) is left after two raced trials
(autotune.study.launches.RACED_TO_LEAVE); one that wins becomes the incumbent the next step
starts from. Request-time values on each launch stay TPE's.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.errors import StudyError
from autotune.params import LAUNCH_PARAMS, base_param
from autotune.records.stored import TrialRecord
from autotune.space import SearchSpace
from autotune.space.sampling import searched
from autotune.study.select import recommend


def next_launch(space: SearchSpace, study: optuna.Study, *, index: int) -> dict[str, Any] | None:
    """Optuna parameter values that pin the next launch; None when every one-lever step from
    the incumbent has been launched (TPE chooses then)."""
    launches = _launches_run(study)
    base = _incumbent_launch(study)
    if base is None:
        return None
    tried = Counter((name, repr(value)) for launch in launches for name, value in launch)
    seen = {frozenset((name, repr(value)) for name, value in launch) for launch in launches}
    steps: list[tuple[int, dict[str, Any]]] = []
    for name in LAUNCH_PARAMS:
        found = searched(space, name, base)
        if found is None or found[1].choices is None or name not in base:
            continue
        for value in found[1].choices:
            if value != base[name]:
                steps.append((tried[(name, repr(value))], {**base, name: value}))
    # Fewest launches with the changed value first; among equals, a seeded order.
    random.Random(f"{space.seed}:launch-step:{index}").shuffle(steps)
    steps.sort(key=lambda step: step[0])
    for _, launch in steps:
        fixed = _pinned(space, launch)
        names = map(base_param, fixed)
        key = frozenset((name, repr(launch[name])) for name in names)
        if fixed and not any(key <= launched for launched in seen):
            return fixed
    return None


def chosen_launches(study: optuna.Study) -> int:
    """Launches the study chose itself: started by a proposal, not the reference or a named
    candidate (counted from the storage, so a resumed study or a second worker agrees)."""
    count = 0
    for trial in study.get_trials(deepcopy=False):
        record = TrialRecord.of(trial)
        if record.launch_started and not record.is_reference and record.candidate is None:
            count += 1
    return count


def _pinned(space: SearchSpace, launch: dict[str, Any]) -> dict[str, Any]:
    """The Optuna names and values of `launch`'s searched launch parameters (a value the
    search does not offer is left to the sampler)."""
    fixed: dict[str, Any] = {}
    for name in LAUNCH_PARAMS:
        found = searched(space, name, launch)
        if found is None or name not in launch:
            continue
        optuna_name, spec = found
        if spec.choices is None or launch[name] in spec.choices:
            fixed[optuna_name] = launch[name]
    return fixed


def _launch_of(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple((name, config[name]) for name in LAUNCH_PARAMS if name in config)


def _launches_run(study: optuna.Study) -> list[tuple[tuple[str, Any], ...]]:
    """The launch-time values of every launch the study ran or is running (the reference's
    apart): a second worker does not start the step the first one is measuring."""
    runs: dict[str, tuple[tuple[str, Any], ...]] = {}
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)
    for trial in study.get_trials(deepcopy=False, states=states):
        record = TrialRecord.of(trial)
        if record.is_reference or record.launch_id is None or not record.config:
            continue
        runs.setdefault(record.launch_id, _launch_of(record.config))
    return list(runs.values())


def _incumbent_launch(study: optuna.Study) -> dict[str, Any] | None:
    """The launch-time values of the trial the study would recommend now."""
    try:
        best = recommend(study)
    except StudyError:
        return None
    config = TrialRecord.of(best.trial).config
    return dict(_launch_of(config)) if config else None
