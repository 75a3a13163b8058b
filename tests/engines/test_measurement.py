"""A session's result turned into a trial's figures (autotune.engines.measurement): the load is
read as its plan says. A context-only load (the capped reference, MeasurePlan.context_only, which
run_phases carries onto the result) too short for a steady window is read after its first
request; the same load from any other plan is no measurement."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from small_space import small_space
from synthetic_load import capped_batch_one_load

from autotune.engines.measurement import to_measurement
from autotune.errors import TrialFailure
from autotune.evalset.dataset import load_evalset
from autotune.measure.summary import NO_TOKENS
from autotune.space import load_space


def test_a_context_only_load_without_a_window_is_measured_after_its_first_request(
    tmp_path: Path,
) -> None:
    space = load_space(str(small_space(tmp_path)))
    config, evalset = space.reference_config(), load_evalset(space.resolve_path(space.evalset))
    args = {"startup_s": 20.0, "evalset": evalset, "measure_accuracy": False}
    m = to_measurement(space, config, capped_batch_one_load(context_only=True), **args)
    assert m.figures["throughput_output_tokens_per_s"] == pytest.approx(128 / 7.2, rel=0.01)
    assert math.isnan(m.figures["throughput_ci_rel"]) and m.figures["throughput_window"] == 0.0
    # The first request (the first call's compilation) is warm-up; the rest is measuring.
    assert m.time_s["warmup"] == pytest.approx(7.4)
    assert m.time_s["measuring"] == pytest.approx(14.4)
    assert m.user_attrs().figure("throughput_window") == 0.0
    with pytest.raises(TrialFailure) as failed:
        to_measurement(space, config, capped_batch_one_load(context_only=False), **args)
    assert failed.value.kind == NO_TOKENS and "too short for a warm-up" in failed.value.reason
