"""`autotune eval`'s --param parsing: how a user writes a value, full size included."""

from __future__ import annotations

from autotune.evaluate import configured, parse_overrides
from autotune.params import TrialConfig


def test_full_size_is_written_null_or_none() -> None:
    for raw in ("null", "None", "~", ""):
        overrides = parse_overrides([f"image_max_side={raw}"])
        assert overrides == {"image_max_side": None}, raw
        assert configured(TrialConfig(image_max_side=256), overrides).image_max_side is None


def test_lowercase_none_stays_a_word() -> None:
    # compile_mode, weight_quant and kv_quant take "none" as a value, not as null.
    assert parse_overrides(["compile_mode=none"]) == {"compile_mode": "none"}
    assert configured(TrialConfig(), parse_overrides(["weight_quant=none"])).weight_quant == "none"
