"""The conditions two measurements of one configuration ran under, compared: the clock that
timed them and the load on the machine.

`autotune verify` relaunches a trial and compares its figures with the recorded ones; a figure
that misses its band may be the configuration's, or the moment's: a relaunch timed on another
clock, or beside more load (a test suite starting servers beside it once moved a smoke study's
figure by three quarters). Each measurement records the load it ran under
(autotune.measure.cpu_load); a miss that coincides with a change of load says so, and how to
measure again.
"""

from __future__ import annotations

from typing import Any

from autotune.records.parts import Environment

# Trials recorded before trials named their clock were all timed on the wall clock.
UNNAMED_CLOCK = "wall clock"
# A share of time waiting for a core that moved by this much is another load, not noise.
LOAD_CHANGE = 0.10
# The load figures, and how each is named in words.
_LOAD = {
    "engine_wait_share": "the engine waited {:.0%} of its runnable time for a core",
    "cpu_pressure_share": "some task waited for a core {:.0%} of the time",
    "load_average_1m": "load average {:.2f}",
}
_SHARES = ("engine_wait_share", "cpu_pressure_share")


def clock_of(environment: Environment) -> str:
    """The clock a measurement's environment names (autotune.engines.inprocess.clock for the
    in-process engine, autotune.engines.server for a server)."""
    return environment.clock or UNNAMED_CLOCK


def on_core(clock: str) -> bool:
    return clock.startswith("on-core")


def clock_note(number: int, recorded: str, measured: str) -> str | None:
    """What to say when the trial and its relaunch were not timed on the same kind of clock:
    a server relaunch is timed on the wall clock, and an in-process trial on a CPU on the
    on-core clock, which leaves out the time its engine waited for a core."""
    if on_core(recorded) == on_core(measured):
        return None
    return (
        f"trial {number} was timed on the {recorded}, this relaunch on the {measured}: not the "
        "same terms (the on-core clock leaves out the time the engine waited for a core, so on "
        "a busy machine the two differ; a trial measured through the deploy command is timed "
        "as its relaunch is)"
    )


def load_of(environment: Environment) -> dict[str, float]:
    """The load figures a measurement recorded (none for one recorded before they were)."""
    return {name: value for name in _LOAD if (value := getattr(environment, name)) is not None}


def load_words(load: dict[str, Any]) -> str:
    """'the engine waited 41% of its runnable time for a core, load average 3.90'; '-'."""
    return ", ".join(_LOAD[name].format(value) for name, value in load.items()) or "-"


def load_change(recorded: dict[str, Any], measured: dict[str, Any]) -> str | None:
    """The shares of waiting for a core that moved by LOAD_CHANGE or more between the two,
    in words; None when none did (or neither side recorded them)."""
    moved = [
        f"{_LOAD[name].format(measured[name])} in the relaunch, {recorded[name]:.0%} recorded"
        for name in _SHARES
        if name in recorded
        and name in measured
        and abs(measured[name] - recorded[name]) >= LOAD_CHANGE
    ]
    return "; ".join(moved) or None
