"""The study's sampler: TPE with a start-up that covers the big levers, or plain random search.

The one-lever steps that come before either (autotune.study.proposals.steps) are pinned around it by
the launch scheduler; this is what proposes everything they leave open, and everything after
them.
"""

from __future__ import annotations

import warnings

import optuna

from autotune.space import SearchSpace
from autotune.study.proposals.coverage import CoveringSampler

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
    # Its start-up covers the levers that move throughput most (autotune.study.proposals.coverage).
    return CoveringSampler(tpe, startup=startup, seed=space.seed)
