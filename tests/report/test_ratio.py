"""The "x the reference" figure carries both intervals (autotune.report.ratio)."""

from __future__ import annotations

import math

import optuna

from autotune.report.ratio import versus_reference


def measured(rate: float, ci_rel: float | None, **attrs: object) -> optuna.trial.FrozenTrial:
    figures = {"throughput_output_tokens_per_s": rate}
    if ci_rel is not None:
        figures["throughput_ci_rel"] = ci_rel
    return optuna.trial.create_trial(value=rate, user_attrs={**figures, **attrs})


def test_the_ratio_carries_both_intervals_in_quadrature_on_the_log_scale() -> None:
    reference = measured(37.1, 0.083, is_reference=True)
    best = measured(2751.6, 0.066)
    reference.number, best.number = 0, 3
    ratio = versus_reference(best, reference)
    assert ratio is not None
    assert math.isclose(ratio.times, 2751.6 / 37.1)
    # Wider than either interval alone, narrower than their sum.
    assert 0.083 < ratio.ci_rel < 0.083 + 0.066
    assert math.isclose(math.log1p(ratio.ci_rel), math.hypot(math.log1p(0.083), math.log1p(0.066)))
    words = ratio.words()
    assert words.startswith("74×") and "±" in words and "37.1 tok/s ±8.3%" in words
    # A reference measured too briefly for an interval: the ratio says it has none.
    brief = measured(37.1, None, is_reference=True)
    brief.number = 0
    assert versus_reference(best, brief).ci_rel is None
    assert "no interval" in versus_reference(best, brief).words()
    assert versus_reference(reference, reference) is None
