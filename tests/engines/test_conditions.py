"""What verify says of the conditions a trial and its relaunch ran under: the load on the
machine (autotune.engines.conditions)."""

from __future__ import annotations

from autotune.engines.conditions import LOAD_CHANGE, load_change, load_of, load_words
from autotune.records.parts import Environment


def test_a_change_of_load_past_its_threshold_is_named_and_a_small_one_is_not() -> None:
    recorded = load_of(Environment.of({"engine_wait_share": "0.020", "load_average_1m": "0.61"}))
    busy = load_of(Environment.of({"engine_wait_share": "0.410", "cpu_pressure_share": "0.63"}))
    assert recorded == {"engine_wait_share": 0.02, "load_average_1m": 0.61}
    moved = load_change(recorded, busy)
    assert moved is not None and "41% of its runnable time" in moved and "2% recorded" in moved
    near = {"engine_wait_share": 0.02 + LOAD_CHANGE / 2}
    assert load_change(recorded, near) is None
    # Pressure recorded on one side only is no change; nothing recorded says nothing.
    assert load_change({"cpu_pressure_share": 0.1}, {}) is None
    assert load_words({}) == "-"
    assert "load average 0.61" in load_words(recorded)
