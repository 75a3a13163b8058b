"""What the study proposes next: the incumbent's one-lever steps, the launch it keeps, or the
sampler's free choice, each through Optuna's PartialFixedSampler around the study's own
(autotune.study.proposals.sampler).

- While the incumbent (the trial the study would recommend now) has an untried one-lever
  neighbour, that step: request-time steps first (every other level of image side and
  concurrency on the incumbent's launch, the levels farthest from the incumbent's first, so
  the ends of a range bracket it), then `launches.launch_steps` launches with one launch
  parameter changed. A step changes its lever alone; one that wins becomes the incumbent.
- Else, while the running launch has trials left (`launches.trials_per_launch`), its
  launch-time parameters, the sampler proposing request-time settings.
- Else nothing: the sampler chooses freely, a new launch included.

A study buys few trials, and TPE's random start-up would spend them blindly. The steps are read
from the storage (the lever values the study's trials ran), so a resumed study and a second
worker go on. A launch whose first two trials both lost their races is left early
(RACED_TO_LEAVE); which launch is up is the launch scheduler's (autotune.study.run.launches).
"""

from __future__ import annotations

import math
import random
import warnings
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
from autotune.study.plan import StudyPlan
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


# Trials on a launch, every one stopped by racing, after which the launch is given up.
RACED_TO_LEAVE = 2


class Steering:
    """Points the study's sampler at its next proposal, trial after trial."""

    def __init__(self, plan: StudyPlan, base_sampler: optuna.samplers.BaseSampler) -> None:
        self.plan = plan
        self.base_sampler = base_sampler
        self.settings = plan.space.launches
        self.repeats_in_a_row = 0
        self.fixed: dict[str, object] | None = None
        # The running launch's parameters as Optuna names them (None before its first trial),
        # and its trials that were not stopped by racing.
        self.session_params: dict[str, object] | None = None
        self.contenders_on_launch = 0
        # The step the next proposal is pinned to, and the backend a launch step pinned (the
        # budget's start-up guess).
        self.step: Step | None = None
        self.pinned_backend: str | None = None

    def new_launch(self) -> None:
        """A trial started a new launch: what was kept of the one before (its parameters, its
        contenders) must not outlive it, or the sampler would be pinned back to it."""
        self.fixed = None
        self.session_params = None
        self.contenders_on_launch = 0

    def keeps_launch(self) -> bool:
        """Whether the next trial runs on the launch that is up (the budget then counts no
        start-up for it): a request-time step on it, or the launch kept for the sampler."""
        if self.step is None:
            return self.fixed is not None
        running = self.session_params
        return running is not None and all(
            running.get(key) == value
            for key, value in self.step.pinned.items()
            if base_param(key) in LAUNCH_PARAMS
        )

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        *,
        on_this_launch: bool,
        trials_on_launch: int,
    ) -> None:
        """Fix the next proposal's launch parameters to this trial's, or free them.
        `on_this_launch`: the trial ran on the launch still up, its `trials_on_launch`-th
        (autotune.study.run.launches.LaunchScheduler)."""
        record = TrialRecord.of(trial)
        duplicate = record.duplicate_of is not None
        self.repeats_in_a_row = self.repeats_in_a_row + 1 if duplicate else 0
        if on_this_launch:
            self.session_params = _launch_params(trial)
        if on_this_launch and record.raced_by is None:
            self.contenders_on_launch += 1
        # A launch whose trials all lost their races by now is a launch to leave: its
        # request-side settings were tried and none can win (eager mode, four times slower).
        hopeless = self.contenders_on_launch == 0 and trials_on_launch >= RACED_TO_LEAVE
        keep = (
            on_this_launch
            and not hopeless
            and trials_on_launch < self.settings.trials_per_launch
            and self.repeats_in_a_row < self.settings.max_repeated_proposals
            and (self.fixed is not None or self._fixable(trial))
        )
        if keep and self.fixed is None:
            self.fixed = _launch_params(trial)
        elif not keep:
            self.fixed = None
        self.steer(study)

    def steer(self, study: optuna.Study) -> None:
        """Point the study's sampler at the next proposal: the incumbent's next one-lever step
        while one is left (next_step), else the launch that is kept, else the sampler
        unrestricted. Run after every trial, and once when a process joins (a
        resumed study, another worker)."""
        space = self.plan.space
        self.step = None
        if space.sampler.steps:
            left = chosen_launches(study) < self.settings.launch_steps
            self.step = next_step(space, study, launch_steps_left=left)
        pinned = self.fixed if self.step is None else self.step.pinned
        backend = (pinned or {}).get("backend") if self.step and self.step.new_launch else None
        self.pinned_backend = backend if isinstance(backend, str) else None
        if pinned is None:
            study.sampler = self.base_sampler
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.sampler = optuna.samplers.PartialFixedSampler(pinned, self.base_sampler)

    def step_of(self, trial: optuna.Trial) -> Step | None:
        """The step `trial` was proposed as, when the sampler was pinned to one."""
        step = self.step
        if step is None or any(trial.params.get(k) != v for k, v in step.pinned.items()):
            return None
        return step

    def _fixable(self, trial: FrozenTrial) -> bool:
        """Whether fixing this trial's parameters pins its whole launch: not so for a reference
        whose launch values lie outside the search (they are not trial parameters)."""
        config = TrialRecord.of(trial).config
        space = self.plan.space
        return bool(config) and all(
            found[0] in trial.params
            for name in LAUNCH_PARAMS
            if (found := searched(space, name, config)) is not None
        )


def _launch_params(trial: FrozenTrial) -> dict[str, object]:
    """The trial's launch-time parameters, by their Optuna names."""
    return {key: value for key, value in trial.params.items() if base_param(key) in LAUNCH_PARAMS}
