"""One-lever steps from the incumbent: the study's first proposals, before the sampler's own.

A few parameters move a serving configuration's throughput several-fold (image side,
concurrency, CUDA graphs, the KV cache share), and a study buys few trials: TPE's random
start-up spends them blindly and leaves whole levels of a lever unseen. So while the incumbent
(the trial the study would recommend now) has an untried neighbour, the next proposal is one.

- Request-time steps first: every other level of image side and concurrency, on the
  incumbent's launch (no start-up to pay; a loser costs the seconds racing needs to stop it).
  Within a lever the levels farthest from the incumbent's come first, so that the ends of its
  range bracket it (the best level may lie at the far end).
- Then launch steps (`launches.launch_steps` of them): one launch parameter changed, with the
  incumbent's request-time levels (equal terms), the value tried on the fewest launches first.
- A step that wins becomes the incumbent (coordinate ascent); with no untried neighbour left,
  the sampler proposes (TPE, whose model then holds every level of every lever).

A step changes its lever alone (every other value copied from the incumbent, or left to the
sampler and named in `Step.also` where the search cannot take it). A pair of image side and
concurrency is stepped to once per engine, so the steps end. They are read from the storage
(the lever values the study's trials ran), so a resumed study and a second worker go on.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StudyError
from autotune.params import LAUNCH_PARAMS, PARAM_NAMES, REQUEST_LEVERS, base_param
from autotune.records.parts import Stepped
from autotune.records.stored import TrialRecord
from autotune.space import SearchSpace
from autotune.space.sampling import contains, searched
from autotune.study.results.counting import SURPLUS
from autotune.study.results.select import front_top

# Launch steps change any launch parameter; request-time steps the request-time levers.
STEPPED = (*LAUNCH_PARAMS, *REQUEST_LEVERS)
ON_ANY_LAUNCH = ("backend", *REQUEST_LEVERS)

Lever = tuple[str, Any]
# Failures that say nothing of the configuration: the trial never measured it.
NOT_RUN_KINDS = frozenset({"interrupted", "orphaned", SURPLUS})
_OUTSIDE = object()
_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)


@dataclass(frozen=True)
class Step:
    """The next proposal's pinned levers, and where they come from."""

    pinned: dict[str, Any]  # Optuna parameter names and values
    lever: str
    value: Any
    from_trial: int
    new_launch: bool
    # Searched parameters the incumbent's values could not pin (outside the search): the
    # sampler draws them, so the step changes them too, and says so.
    also: tuple[str, ...] = ()

    def describe(self) -> Stepped:
        """What the trial records as `step` (its other levers only where it changed some)."""
        also = {"also": list(self.also)} if self.also else {}
        return Stepped.model_construct(
            lever=self.lever, value=self.value, from_trial=self.from_trial, **also
        )


def next_step(space: SearchSpace, study: optuna.Study, *, launch_steps_left: bool) -> Step | None:
    """The incumbent's next untried one-lever neighbour; None when there is none (or no
    feasible incumbent yet): the sampler proposes then."""
    base_trial = _incumbent(study)
    if base_trial is None:
        return None
    base = TrialRecord.of(base_trial).config
    if not base or _pinned(space, base, LAUNCH_PARAMS) is None:
        return None  # a launch the space cannot pin (the reference's engine): nothing to step
    trials = [t for t in study.get_trials(deepcopy=False, states=_STATES) if _ran(t)]
    tried = [_key(TrialRecord.of(t).config, STEPPED) for t in trials]
    order = random.Random(f"{space.seed}:step:{len(tried)}")
    for lever, value in _request_steps(space, base, order) + (
        _launch_steps(space, base, trials, order) if launch_steps_left else []
    ):
        moved = {**base, lever: value}
        pinned = _pinned(space, moved, STEPPED)
        if pinned is None:
            continue
        # Compared on what the step pins only: a trial's stored configuration holds values
        # its engine cannot vary at their neutral value (autotune.params), not the step's.
        wanted = {_value(base_param(name), v) for name, v in pinned.items()}
        if not any(item[0] == "backend" for item in wanted):  # not searched: the base's
            wanted.add(_value("backend", base.get("backend")))
        if lever in REQUEST_LEVERS:
            # A request-time level tried on any launch of the engine is not stepped to again:
            # launch parameters scale the rate much alike, and an incumbent that moved to an
            # equal launch (fp16 for bf16, by noise) would sweep its levels a second time.
            wanted = {item for item in wanted if item[0] in ON_ANY_LAUNCH}
        if any(wanted <= key for key in tried):
            continue
        # Every other searched value copied from the incumbent, decoding included.
        rest, also = _copied(space, moved)
        return Step(rest | pinned, lever, value, base_trial.number, lever in LAUNCH_PARAMS, also)
    return None


def _copied(space: SearchSpace, config: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The Optuna names and values that pin each searched parameter of `config` besides the
    levers, and the names of those whose value the search cannot take (left to the sampler)."""
    pinned: dict[str, Any] = {}
    unpinned: list[str] = []
    for name in PARAM_NAMES:
        if name in STEPPED:
            continue
        one = _pinned(space, config, (name,))
        if one is None:
            unpinned.append(name)
        else:
            pinned |= one
    return pinned, tuple(unpinned)


def _ran(trial: FrozenTrial) -> bool:
    """Whether a trial tried its configuration: not one interrupted, orphaned by a crash or
    stepped back before it measured (its step is proposed again), nor a repeat."""
    record = TrialRecord.of(trial)
    return (
        bool(record.config)
        and record.duplicate_of is None
        and record.failure_kind not in NOT_RUN_KINDS
    )


def _incumbent(study: optuna.Study) -> FrozenTrial | None:
    """The trial the study would recommend now, when a feasible deployable one finished."""
    try:
        found = front_top(study)
    except StudyError:  # a deploy target not registered here: no incumbent to step from
        return None
    return None if found is None else found.best


def _request_steps(space: SearchSpace, base: dict[str, Any], order: random.Random) -> list[Lever]:
    """Every other level of each request lever, farthest from the base's first; the levers
    taken in turn (the farthest of each, then the next of each), ties in a seeded order."""
    ranked: list[tuple[int, float, Lever]] = []
    for lever in REQUEST_LEVERS:
        levels = _levels(space, base, lever)
        if levels is None:
            continue
        by_size = sorted({*levels, base[lever]}, key=_size)
        here = by_size.index(base[lever])
        others = sorted(
            (v for v in levels if not _same(v, base[lever])),
            key=lambda v: -abs(by_size.index(v) - here),
        )
        ranked += [(turn, order.random(), (lever, v)) for turn, v in enumerate(others)]
    return [lever for *_, lever in sorted(ranked, key=lambda r: r[:2])]


def _launch_steps(
    space: SearchSpace, base: dict[str, Any], trials: list[FrozenTrial], order: random.Random
) -> list[Lever]:
    """Every other value of each launch parameter, the value tried on the fewest launches
    first, ties in a seeded order."""
    launches: dict[str, frozenset[Lever]] = {}
    for trial in trials:
        record = TrialRecord.of(trial)
        if not record.is_reference:
            key = record.launch_id or f"trial {trial.number}"  # not started: one of its own
            launches[key] = _key(record.config, LAUNCH_PARAMS)
    seen = Counter(value for launch in launches.values() for value in launch)
    steps = [
        (seen[_value(name, value)], order.random(), (name, value))
        for name in LAUNCH_PARAMS
        for value in _levels(space, base, name) or []
        if not _same(value, base.get(name))
    ]
    return [lever for *_, lever in sorted(steps, key=lambda s: s[:2])]


def _levels(space: SearchSpace, base: dict[str, Any], name: str) -> list[Any] | None:
    """The searched choices of `name` around `base`; None when it is not a searched choice."""
    found = searched(space, name, base)
    if found is None or found[1].choices is None or name not in base:
        return None
    return list(found[1].choices)


def _pinned(space: SearchSpace, config: dict[str, Any], names: tuple[str, ...]) -> dict | None:
    """The Optuna names and values that pin `names` of `config`, each value as the space
    spells it (a stored 1.0 for a choice written 1); None when one that is searched cannot
    take its value (a named candidate's value outside the search)."""
    pinned: dict[str, Any] = {}
    for name in names:
        found = searched(space, name, config)
        if found is None or name not in config:
            continue
        spec, value = found[1], config[name]
        if spec.choices is not None:
            value = next((c for c in spec.choices if _same(c, value)), _OUTSIDE)
        if value is _OUTSIDE or not contains(spec, value):
            return None
        pinned[found[0]] = value
    return pinned


def _size(value: Any) -> float:
    """A level's place on its lever: no image cap is the largest side."""
    if value is None:
        return math.inf
    return float(value) if isinstance(value, int | float) else 0.0


def _key(config: dict[str, Any], names: tuple[str, ...]) -> frozenset[Lever]:
    return frozenset(_value(name, config.get(name)) for name in names)


def _same(a: Any, b: Any) -> bool:
    return _value("", a) == _value("", b)


def _value(name: str, value: Any) -> Lever:
    """A lever value as compared here: 1 and 1.0 alike (a space file's choice and a stored
    configuration), True apart from 1."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return name, float(value)
    return name, repr(value)


def chosen_launches(study: optuna.Study) -> int:
    """Launches the study chose itself: the distinct launch-time values it ran, other than
    the reference's and the named candidates'. Counted from the storage, so a resumed study,
    a relaunch after it, or a second worker agrees."""
    runs: dict[str, tuple[frozenset[Lever], bool]] = {}
    for trial in study.get_trials(deepcopy=False, states=_STATES):
        record = TrialRecord.of(trial)
        if record.is_reference or record.duplicate_of is not None or not record.config:
            continue
        launch = _key(record.config, LAUNCH_PARAMS)
        key = record.launch_id or f"trial {trial.number}"
        if key not in runs or record.candidate is not None:
            runs[key] = (launch, record.candidate is not None)
    candidates = {launch for launch, candidate in runs.values() if candidate}
    return len({launch for launch, candidate in runs.values() if launch not in candidates})
