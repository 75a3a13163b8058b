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
from autotune.space.sampling import contains, searched
from autotune.study.select import recommend

Launch = frozenset[tuple[str, Any]]


def next_launch(space: SearchSpace, study: optuna.Study, *, index: int) -> dict[str, Any] | None:
    """Optuna parameter values that pin the next launch; None when every one-lever step from
    the incumbent has been launched (TPE chooses then)."""
    base = _incumbent_launch(study)
    if base is None:
        return None
    launches = [launch for launch, _ in _launches_run(study)]
    tried = Counter(value for launch in launches for value in launch)
    steps: list[tuple[int, dict[str, Any]]] = []
    for name in LAUNCH_PARAMS:
        found = searched(space, name, base)
        if found is None or found[1].choices is None or name not in base:
            continue
        for value in found[1].choices:
            if _same(value, base[name]):
                continue
            steps.append((tried[_value(name, value)], {**base, name: value}))
    # Fewest launches with the changed value first; among equals, a seeded order.
    random.Random(f"{space.seed}:launch-step:{index}").shuffle(steps)
    steps.sort(key=lambda step: step[0])
    for _, launch in steps:
        fixed = _pinned(space, launch)
        key = frozenset(_value(name, launch[name]) for name in map(base_param, fixed))
        if fixed and not any(key <= launched for launched in launches):
            return fixed
    return None


def chosen_launches(study: optuna.Study) -> int:
    """Launches the study chose itself: the distinct launch-time values it ran, other than
    the reference's and the named candidates'. Counted from the storage, so a resumed study,
    a relaunch after it, or a second worker agrees."""
    runs = _launches_run(study)
    candidates = {launch for launch, candidate in runs if candidate}
    return len({launch for launch, candidate in runs if launch not in candidates})


def _pinned(space: SearchSpace, launch: dict[str, Any]) -> dict[str, Any]:
    """The Optuna names and values of `launch`'s searched launch parameters (a value outside
    the search, a named candidate's, say, is left to the sampler)."""
    fixed: dict[str, Any] = {}
    for name in LAUNCH_PARAMS:
        found = searched(space, name, launch)
        if found is not None and name in launch and contains(found[1], launch[name]):
            fixed[found[0]] = launch[name]
    return fixed


def _same(a: Any, b: Any) -> bool:
    return _value("", a) == _value("", b)


def _value(name: str, value: Any) -> tuple[str, Any]:
    """A launch value as compared here: 1 and 1.0 alike (a space file's choice and the stored
    configuration), True apart from 1."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return name, float(value)
    return name, repr(value)


def _launches_run(study: optuna.Study) -> list[tuple[Launch, bool]]:
    """Each launch the study ran, is running or failed to start (the reference's apart), with
    whether a named candidate opened it. A trial whose launch failed to start, or is starting
    on another worker, has no launch id yet: it counts as a launch of its own, so the same
    step is not pinned again."""
    runs: dict[str, tuple[Launch, bool]] = {}
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)
    for trial in study.get_trials(deepcopy=False, states=states):
        record = TrialRecord.of(trial)
        if record.is_reference or record.duplicate_of is not None or not record.config:
            continue
        launch = frozenset(_value(name, value) for name, value in _launch_of(record.config))
        key = record.launch_id or f"trial {trial.number}"
        if key not in runs or record.candidate is not None:
            runs[key] = (launch, record.candidate is not None)
    return list(runs.values())


def _launch_of(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple((name, config[name]) for name in LAUNCH_PARAMS if name in config)


def _incumbent_launch(study: optuna.Study) -> dict[str, Any] | None:
    """The launch-time values of the trial the study would recommend now."""
    try:
        best = recommend(study)
    except StudyError:
        return None
    config = TrialRecord.of(best.trial).config
    return dict(_launch_of(config)) if config else None
