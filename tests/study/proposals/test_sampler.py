"""The search's start-up covers the big levers (autotune.study.proposals.sampler)."""

from __future__ import annotations

from collections import Counter

import optuna

from autotune.study.proposals.sampler import CoveringSampler

SIDES = [None, 1024, 768, 512]
BATCHES = [1, 8, 16, 32, 64]


def _propose(trial: optuna.Trial) -> float:
    side = trial.suggest_categorical("image_max_side", SIDES)
    batch = trial.suggest_categorical("batch_size", BATCHES)
    trial.suggest_float("temperature", 0.1, 1.0)  # not a lever: drawn as TPE draws it
    return batch / (side or 2048)


def test_the_start_up_covers_every_level_of_every_lever_evenly() -> None:
    tpe = optuna.samplers.TPESampler(seed=3, n_startup_trials=10)
    study = optuna.create_study(
        direction="maximize", sampler=CoveringSampler(tpe, startup=10, seed=3)
    )
    study.enqueue_trial({"image_max_side": None, "batch_size": 1, "temperature": 0.5})
    study.optimize(_propose, n_trials=11)
    sampled = [t.params for t in study.trials[1:]]  # the enqueued reference does not count
    sides = Counter(p["image_max_side"] for p in sampled)
    batches = Counter(p["batch_size"] for p in sampled)
    # 10 proposals: each of 4 sides 2-3 times, each of 5 concurrencies exactly twice.
    assert set(sides) == set(SIDES) and max(sides.values()) - min(sides.values()) <= 1
    assert batches == dict.fromkeys(BATCHES, 2)
    # Within the first round of each lever no level repeats.
    assert len({p["batch_size"] for p in sampled[:5]}) == 5
    assert len({p["image_max_side"] for p in sampled[:4]}) == 4
    # The pairs are not locked together: the levers are shuffled independently.
    assert len({(p["image_max_side"], p["batch_size"]) for p in sampled}) >= 8
    # After the start-up TPE proposes again, from its own model.
    study.optimize(_propose, n_trials=3)
    assert len(study.trials) == 14
