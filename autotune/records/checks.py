"""Records that cannot be true: figures out of range, a failure on a completed trial, stored
objective values that disagree with the record's figures, a second reference of one machine.

A record that reads (autotune.records.stored) can still say what no measurement gives: a
negative throughput (shown as "-5.0 tok/s"), a 1e308 one (printed as 309 digits), `failure_kind:
oom` on a completed trial, or an objective value Optuna ranks by that is not the figure `best`
prints (a forged 100,000 tok/s printed on the reference while another trial is "best"). Every
reader sees such a trial as a stand-in named impossible (autotune.records.readable), left out
of the ranking and named in one line, never printed as fact. The writer
(autotune.records.writer) refuses figures out of range before they are stored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune.measure.registry import METRICS, THROUGHPUT
from autotune.records.machine import trial_machine

# How far a stored objective value may lie from the record's figure: both are the same float,
# written once as JSON and once by Optuna, so only rounding may separate them.
AGREEMENT_REL = 1e-9


def figure_problem(figures: Mapping[str, Any]) -> str | None:
    """The first registered figure out of its range ('name: what is wrong'), or None."""
    for name, spec in METRICS.items():
        value = figures.get(name)
        if type(value) not in (int, float):
            continue  # not recorded (the record's types say what kind a figure must be)
        if math.isnan(value):
            if spec.may_be_unknown:
                continue
            return f"{name}: NaN, where a measured figure is a number"
        if not 0 <= value <= spec.high:
            return f"{name}: {value:.6g} lies outside 0 to {spec.high:g}"
    return None


def objective_metrics(study_attrs: Mapping[str, Any]) -> list[str]:
    """The metric each objective value is, as the study's attributes name them ([] when they
    do not: a study stored before they were)."""
    named = study_attrs.get("objective_metrics")
    if isinstance(named, list) and all(isinstance(name, str) for name in named):
        return list(named)
    return []


def trial_problem(trial: FrozenTrial, metrics: Sequence[str]) -> str | None:
    """Why a finished trial's readable record is impossible for its state and values, or None.
    `metrics`: the study's objective metrics, in order ([]: not named, not compared)."""
    attrs = trial.user_attrs
    figures = figure_problem(attrs)
    if figures is not None or trial.state != TrialState.COMPLETE:
        return figures
    kind = attrs.get("failure_kind")
    if kind is not None:
        return f"failure_kind {kind!r} on a completed trial (a failed trial is FAIL or PRUNED)"
    throughput = attrs.get(THROUGHPUT)
    if type(throughput) in (int, float) and throughput <= 0:
        return f"{THROUGHPUT}: {throughput} on a completed trial, a load that counted no token"
    values = trial.values or []
    if len(metrics) != len(values):
        return None
    for index, (name, value) in enumerate(zip(metrics, values, strict=True)):
        figure = attrs.get(name)
        if type(figure) not in (int, float):
            continue  # a metric the record does not name (an old study's): nothing to compare
        if not math.isclose(figure, value, rel_tol=AGREEMENT_REL, abs_tol=1e-12):
            return (
                f"objective {index} ({name}) is stored as {value:.6g} but the record says "
                f"{figure:.6g}"
            )
    return None


def second_references(trials: Sequence[FrozenTrial]) -> dict[int, str]:
    """Completed trials that claim to be the reference after the first one of their
    comparison group did, and why each is impossible (a study measures one reference on each
    machine it was resumed on; every reader takes the first)."""
    first: dict[str | None, int] = {}
    found = {}
    for trial in sorted(trials, key=lambda t: t.number):
        if trial.state != TrialState.COMPLETE or trial.user_attrs.get("is_reference") is not True:
            continue
        machine = trial_machine(trial.user_attrs)
        group = machine.group if machine is not None else None
        if group not in first:
            first[group] = trial.number
        else:
            found[trial.number] = (
                f"is_reference: a second reference (trial {first[group]} is the first)"
            )
    return found
