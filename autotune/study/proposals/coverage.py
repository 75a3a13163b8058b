"""The study's first proposals cover the levers that move throughput most, then TPE takes over.

TPE starts with `n_startup_trials` random draws over every parameter. Most of a serving
space's parameters barely move the rate (sampling settings, the repetition penalty), while a
few move it several-fold: image side, concurrency, the KV cache share and CUDA graphs. Random
draws over 4 sides x 5 concurrencies leave whole rows unseen after eight trials, and TPE then
builds its model around what it happened to see: in the replay benchmark (bench/cpu/replay.py)
the study ended at 84-90% of the surface's best in 30 minutes, below random search.

So the start-up proposals draw the levers from a Latin design instead: each lever's levels in
a seeded shuffled order, repeated, with the levers shuffled independently of each other, so
that after k proposals every level of every lever has been tried about k/levels times and
the combinations differ. Everything else is drawn as TPE draws it. Named candidates and the
reference are enqueued trials and do not count; the running launch's own parameters stay
fixed around this sampler (autotune.study.run.launches), so a launch's request-side levers are
covered before a new launch is paid for.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from autotune.params import LEVERS, base_param


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
