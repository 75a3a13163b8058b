"""The study's sampler: TPE with a start-up that covers the big levers, or plain random search.

The one-lever steps that come before either (autotune.study.proposals.steering) are pinned
around it by the launch scheduler; this is what proposes everything they leave open, and
everything after them.

TPE starts with random draws over every parameter, but only a few levers move throughput
several-fold (image side, concurrency, the KV cache share, CUDA graphs): random draws leave
whole rows of them unseen, and TPE then builds its model around what it happened to see. So
the start-up draws those levers from a Latin design (CoveringSampler): each lever's levels in
a seeded shuffled order, repeated, the levers shuffled independently of each other, so that
after k proposals every level of every lever has been tried about k/levels times. Everything
else is drawn as TPE draws it; enqueued trials (the reference, named candidates) do not count,
and the running launch's own parameters stay fixed around it (autotune.study.run.launches).
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from autotune.params import LEVERS, base_param
from autotune.space import SearchSpace


class CoveringSampler(BaseSampler):
    """`base` after `startup` sampled proposals; during them, a Latin design over LEVERS."""

    def __init__(self, base: BaseSampler, *, startup: int, seed: int | None) -> None:
        self.base = base
        self.startup = startup
        self.seed = seed
        # Each trial's place among the sampled proposals: asked once per parameter, counted
        # once per trial (it reads every trial of the study).
        self._indices: dict[int, int] = {}

    def _index(self, study: optuna.Study, trial: FrozenTrial) -> int:
        """How many sampled (not enqueued) proposals came before `trial`."""
        states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING)
        earlier = study.get_trials(deepcopy=False, states=states)
        return sum(
            1 for t in earlier if t.number < trial.number and "fixed_params" not in t.system_attrs
        )

    def _covering(self, study: optuna.Study, trial: FrozenTrial) -> int | None:
        if "fixed_params" in trial.system_attrs:
            return None
        if trial.number not in self._indices:
            self._indices[trial.number] = self._index(study, trial)
        index = self._indices[trial.number]
        return index if index < self.startup else None

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        if self._covering(study, trial) is not None:
            return {}  # every parameter goes through sample_independent below
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:  # a covering proposal (TPE's group state is not set up for it)
            return {}
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        index = self._covering(study, trial)
        lever = base_param(param_name)
        categorical = isinstance(param_distribution, CategoricalDistribution)
        if index is not None and lever in LEVERS and categorical:
            return latin_level(param_distribution.choices, lever, index, self.seed)
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()


def latin_level(choices: Sequence[Any], lever: str, index: int, seed: int | None) -> Any:
    """The `index`-th level of a lever: its levels in a shuffled order, reshuffled every round,
    each lever on its own stream (so two levers do not move in step)."""
    levels = list(choices)
    round_, position = divmod(index, len(levels))
    order = random.Random(f"{seed}:{lever}:{round_}").sample(levels, len(levels))
    return order[position]


# A study's typical trial, in seconds, for sizing TPE's start-up from the budget before any
# trial has run: 898 s bought 15 trials of the default study on the H200 (60 s each,
# bench/results/h200-study-resumed-2026-12-03.md); the replay of 30 minutes buys 34-39 (50 s).
TYPICAL_TRIAL_S = 55.0
# The start-up takes this share of the trials the budget should buy: TPE needs some random
# points to model from, and the rest of the budget is where its model pays.
STARTUP_SHARE = 0.25


def startup_trials(space: SearchSpace) -> int:
    """TPE's random start-up: the space's own number, else a quarter of the trials the budget
    should buy (4-10), else a third of the trial target (2-10)."""
    if space.sampler.n_startup_trials is not None:
        return space.sampler.n_startup_trials
    if space.budget is not None:
        return max(4, min(10, round(STARTUP_SHARE * space.budget / TYPICAL_TRIAL_S)))
    return max(2, min(10, space.trials // 3))


def make_sampler(space: SearchSpace) -> optuna.samplers.BaseSampler:
    """The sampler the space asks for, seeded with its seed."""
    if space.sampler.kind == "random":
        return optuna.samplers.RandomSampler(seed=space.seed)
    startup = startup_trials(space)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        tpe = optuna.samplers.TPESampler(
            seed=space.seed,
            multivariate=True,
            group=True,  # conditional parameters (sampling only when do_sample, ...)
            n_startup_trials=startup,
        )
    # Its start-up covers the levers that move throughput most (CoveringSampler, above).
    return CoveringSampler(tpe, startup=startup, seed=space.seed)
