"""The recommendation beside the deploy target's defaults in `best`, its JSON and the report:
the gain with its interval, and the cost per million output tokens when a price is given.

The price is `--gpu-price-per-hour` where given, else the space's `gpu_price_per_hour`; no
price is assumed, so without one no cost is shown (a made-up price would read as a finding).
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.records.stored import StudyRecord, TrialRecord
from autotune.study.results.gain import (
    baseline_trial,
    cost_words,
    gain_over_baseline,
    trial_cost,
    usd,
)


def study_price(study: optuna.Study, price: float | None) -> float | None:
    """The hourly price to cost with: `price` (the command's flag), else the space's."""
    return price if price is not None else StudyRecord.of(study).gpu_price_per_hour


def baseline_json(
    study: optuna.Study, trial: FrozenTrial | None, price: float | None
) -> dict[str, Any]:
    """`best --json`'s baseline, gain over it and costs (`trial`: the recommendation)."""
    base = baseline_trial(study)
    price = study_price(study, price)
    gain = gain_over_baseline(trial, base) if trial is not None else None
    return {
        "baseline": None
        if base is None
        else {"trial": base.number, "label": TrialRecord.of(base).baseline},
        "versus_baseline": gain.to_dict() if gain is not None else None,
        "cost": None
        if price is None
        else {
            "gpu_price_per_hour": price,
            "recommended_usd_per_million_tokens": trial_cost(trial, price),
            "baseline_usd_per_million_tokens": trial_cost(base, price),
        },
    }


def gain_lines(study: optuna.Study, trial: FrozenTrial, price: float | None) -> list[str]:
    """The recommendation's lines about the baseline and cost, for `best` and the report."""
    base = baseline_trial(study)
    price = study_price(study, price)
    lines = []
    gain = gain_over_baseline(trial, base)
    if gain is not None:
        lines.append(f"gain: {gain.words()} ({gain.detail()})")
    elif base is not None and base.number == trial.number:
        lines.append(f"the baseline itself ({TrialRecord.of(base).baseline}) is recommended")
    else:
        lines.append("gain: no baseline measured (the deploy target's defaults)")
    if price is None:
        return lines
    cost, base_cost = trial_cost(trial, price), trial_cost(base, price)
    if cost is not None:
        line = f"cost: {cost_words(cost)} at ${price:g}/h"
        if base_cost is not None and base is not None and base.number != trial.number:
            line += f" ({TrialRecord.of(base).baseline}: {usd(base_cost)})"
        lines.append(line)
    return lines
