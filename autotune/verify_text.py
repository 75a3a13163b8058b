"""How `autotune verify` reads: the relaunch, its notes, one row per figure, the rule it
applied and the verdict.

The words are kept apart from the relaunch (autotune.verify) so `autotune verify` and the
outside tool's check (autotune.outside.check) print the same lines; the last two, the rule
and PASS or FAIL, are one unwrapped line each, so a script can find them.
"""

from __future__ import annotations

import io
import math

from rich.console import Console
from rich.table import Table

from autotune.engines.conditions import load_words
from autotune.measure.registry import METRICS
from autotune.verify import ONE_SIDED, Check, VerifyResult


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def verify_text(result: VerifyResult) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=140, highlight=False)
    console.print(f"verify: study '{result.study}', trial {result.trial}, via {result.target}")
    if result.command:
        # One unwrapped line, so it can be copied back into a shell.
        console.print(f"  relaunched: {result.command}", markup=False, soft_wrap=True)
    if result.recorded_clock or result.measured_clock:
        console.print(
            f"  clocks: recorded on the {result.recorded_clock or '-'}; relaunch measured on "
            f"the {result.measured_clock or '-'}",
            soft_wrap=True,
        )
    if result.recorded_load or result.measured_load:
        console.print(
            f"  load: recorded {load_words(result.recorded_load)}; relaunch "
            f"{load_words(result.measured_load)}",
            soft_wrap=True,
        )
    for note in result.notes:
        console.print(f"  note: {note}")
    if result.failure is not None:
        console.print(f"FAIL: the relaunch did not complete: {result.failure}")
        if result.log_tail:
            console.print("  last lines of the server log:")
            for line in result.log_tail.rstrip().splitlines()[-15:]:
                console.print(f"    {line}", markup=False)
        return buffer.getvalue().rstrip()
    table = Table(title_justify="left")
    for header in ("metric", "recorded", "measured", "change", "rule", "band", "result"):
        table.add_column(header)
    for c in result.checks:
        change = (
            f"{(c.measured - c.recorded) / c.recorded:+.0%}"
            if c.recorded and c.measured is not None
            else "-"
        )
        verdict = "-" if c.passed is None else ("ok" if c.passed else f"FAIL ({c.miss})")
        table.add_row(
            c.metric, _cell(c.recorded), _cell(c.measured), change, c.rule, _band(c), verdict
        )
    console.print(table)
    for c in result.checks:
        if c.recorded_interval is not None and c.covered is not None:
            console.print(_interval_line(c, result.tolerance), soft_wrap=True)
    # Unwrapped, so each stays one line a script can find.
    console.print(rule_text(result), soft_wrap=True)
    console.print(verdict_text(result), soft_wrap=True)
    return buffer.getvalue().rstrip()


def _interval_line(c: Check, tolerance: float) -> str:
    """Where the new figure lies against the study's interval, and what decided: its band
    (the interval widened by the tolerance), never the interval alone."""
    low, high = c.recorded_interval or (math.nan, math.nan)
    line = f"{c.metric}: the new figure {_cell(c.measured)} is "
    line += f"{'inside' if c.covered else 'OUTSIDE'} the study's 95% interval [{_cell(low)}, "
    line += f"{_cell(high)}]"
    if c.measured_interval is not None:
        line += f"; its own interval is [{_cell(c.measured_interval[0])}, "
        line += f"{_cell(c.measured_interval[1])}]"
    if not c.covered and c.passed is not None:
        line += (
            f"; it passes through the {tolerance:.0%} tolerance: the band decides, not the interval"
            if c.passed
            else "; outside its band too: a miss"
        )
    return line


def _band(check: Check) -> str:
    if check.low is not None and check.high is not None:
        return f"[{_cell(check.low)}, {_cell(check.high)}]"
    if check.low is not None:
        return f">= {_cell(check.low)}"
    if check.high is not None:
        return f"<= {_cell(check.high)}"
    return "-"


def rule_text(result: VerifyResult) -> str:
    """The rule the verdict applied, in words."""
    band = (
        f"the study's 95% throughput interval ±{result.tolerance:.0%} of the recorded figure "
        "(--tolerance); latencies under a closed loop carry the same interval (Little's law), "
        "under open-loop arrivals the tolerance only; accuracy ±max_drop"
    )
    if result.rule == ONE_SIDED:
        return (
            f"rule: one-sided (--one-sided): only a figure worse than its band ({band}) is a "
            "miss; a better one passes"
        )
    return (
        f"rule: two-sided: a figure outside its band ({band}), above or below, is a miss; "
        "--one-sided passes better figures"
    )


def verdict_text(result: VerifyResult) -> str:
    """PASS, or FAIL with each missed figure, the side it left its band on and what it means."""
    missed = [c for c in result.checks if c.passed is False]
    if not missed:
        return "PASS"
    parts, better_seen = [], False
    for c in missed:
        better = (c.miss == "above") == (METRICS[c.metric].direction == "maximize")
        better_seen = better_seen or better
        what = "better" if better else "worse"
        parts.append(f"{c.metric} {c.miss} its band {_band(c)} ({what} than recorded)")
    hint = (
        "; a figure better than its band means the study did not measure what this command "
        "gives here (other load on the machine then or now, another host, other threads)"
        if better_seen
        else ""
    )
    return f"FAIL: {'; '.join(parts)}{hint}"
