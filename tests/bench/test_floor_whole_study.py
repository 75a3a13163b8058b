"""bench/cpu/floor_whole_study.py, reduced: the recommendation's error stays near its bound."""

from __future__ import annotations

import sys

from small_space import REPO

sys.path.insert(0, str(REPO))

from bench.cpu.floor_whole_study import STUDY_SETTINGS, check, whole_study


def test_confirmation_bounds_the_recommendations_error() -> None:
    # Ten configurations, half of them losing exactly max_drop and the fastest the lossiest:
    # without confirmation the fastest the floor passes loses max_drop in about 1 - 0.9^5 of
    # studies; with it, at most 1 - confidence (loosely: 60 studies).
    cell = whole_study(STUDY_SETTINGS["default"], 10, 60, seed=1)
    assert cell["holdout_items"] + cell["search_items"] == 3000
    assert cell["recommended_loses_max_drop"] <= 0.2
    assert cell["without_confirmation_loses_max_drop"] > cell["recommended_loses_max_drop"]
    assert cell["recommended_loses_nothing"] > 0.3  # it still recommends something good
    assert check(cell) is None
    # Tested only when faster than the best confirmed: the same recommendation as testing
    # every one the floor passed, for fewer held-out answers.
    assert cell["same_as_every_one_tested"] == 1.0
    assert cell["passed_not_tested_per_study"] > 0
    assert cell["holdout_items_answered_per_study"] < cell["holdout_items_every_one_tested"]


def test_smoke_settings_confirm_identical_answers() -> None:
    cell = whole_study(STUDY_SETTINGS["smoke"], 5, 60, nested=True, seed=2)
    assert cell["recommended_loses_max_drop"] <= 0.15
    assert cell["recommended_loses_nothing"] > 0.5
