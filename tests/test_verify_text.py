"""How verify reads: each side's clock and load, and the line that says whether the
interval or the band decided a figure."""

from __future__ import annotations

from typing import Any

from autotune.engines.conditions import clock_note
from autotune.measure.registry import THROUGHPUT
from autotune.verify import VerifyResult, speed_check, with_intervals
from autotune.verify_text import verify_text


def _result(**fields: Any) -> VerifyResult:
    """A relaunch of trial 3 of study 's' through swift, with `fields` set."""
    base: dict[str, Any] = {"study": "s", "trial": 3, "target": "swift server"}
    base |= {"command": "swift deploy ...", "exact": True, "notes": []}
    return VerifyResult(**(base | fields))


def test_verify_names_each_side_s_clock_and_says_when_they_differ() -> None:
    """Issue 40: a trial timed on the on-core clock and a relaunch on the wall clock are not
    the same terms; verify says which clock each side used, and says so when they differ."""
    on_core = "on-core clock (wall time less the engine thread's run-queue wait)"
    wall = "wall clock (the client times each request over HTTP)"
    assert clock_note(3, wall, wall) is None
    assert clock_note(3, on_core, on_core) is None
    note = clock_note(3, on_core, wall)
    assert note is not None and "not the same terms" in note and "trial 3" in note
    result = _result(notes=[note], recorded_clock=on_core, measured_clock=wall)
    text = verify_text(result)
    assert f"clocks: recorded on the {on_core}; relaunch measured on the {wall}" in text


def test_verify_shows_the_load_each_side_ran_under() -> None:
    """Issue 56: a relaunch beside a test suite measured a quarter of the recorded figure with
    no word about the machine; verify shows the load each side saw (and its JSON carries it)."""
    result = _result(
        recorded_load={"engine_wait_share": 0.02, "load_average_1m": 0.4},
        measured_load={"engine_wait_share": 0.41, "cpu_pressure_share": 0.63},
    )
    text = verify_text(result)
    assert "load: recorded the engine waited 2% of its runnable time for a core" in text
    assert "relaunch the engine waited 41% of its runnable time for a core" in text
    assert result.to_dict()["measured_load"] == {
        "engine_wait_share": 0.41,
        "cpu_pressure_share": 0.63,
    }


def test_a_relaunch_outside_the_interval_is_told_what_decided() -> None:
    """Issue 54: relaunches at +30% and -20% of the recorded figure passed through the ±25%
    tolerance while the words read as if the interval decided; the line now says which did."""
    recorded = {THROUGHPUT: 1000.0, "throughput_ci_rel": 0.08}
    checks = {
        measured: with_intervals(
            speed_check(THROUGHPUT, 1000.0, measured, 0.25, interval_rel=0.08),
            recorded.get,
            {THROUGHPUT: measured}.get,
        )
        for measured in (1010.0, 1300.0, 590.0)
    }
    said = {measured: verify_text(_result(checks=[c])) for measured, c in checks.items()}
    assert "is inside the study's 95% interval [920.0, 1080.0]\n" in said[1010.0] + "\n"
    assert (
        "OUTSIDE the study's 95% interval [920.0, 1080.0]; it passes through the 25% tolerance: "
        "the band decides, not the interval" in said[1300.0]
    )
    assert said[1300.0].splitlines()[-1] == "PASS"
    assert (
        "OUTSIDE the study's 95% interval [920.0, 1080.0]; outside its band too: a miss"
        in said[590.0]
    )
    assert said[590.0].splitlines()[-1].startswith("FAIL")
