"""A floor that explains itself: why a trial is infeasible, and whether a set can tell.

Every infeasible trial carries its reasons in words (`infeasible_because`), such as "accuracy
0.188 vs reference 0.188; 90% paired interval [-0.094, +0.094] does not exclude a drop of 0.05
with 32 items". And before trusting a relative floor, a study checks that its evaluation set
is large enough to show non-inferiority at all (`items_needed`).
"""

from __future__ import annotations

import math
from typing import Any

from autotune.accuracy.reach import SetReach, items_to_pass, set_reach
from autotune.records.parts import FloorVerdict, Paired
from autotune.records.stored import TrialRecord
from autotune.space import Constraints


def items_needed(reference_accuracy: float, max_drop: float, confidence: float) -> int:
    """Items for a candidate as accurate as the reference to pass a non-inferiority margin.

    A candidate that answers some items differently, but is right as often, has a paired
    difference of mean 0 and a per-item spread of sqrt(d), where d is the share of items on
    which exactly one of the two is right; at most d = 2p(1-p) when their errors are
    unrelated. The interval's half-width z*sqrt(d/n) stays under `max_drop` once
    n >= (z / max_drop)^2 * d.
    """
    from scipy import stats  # here, not at the top: 0.8 s of import every command paid

    p = min(max(reference_accuracy, 0.0), 1.0)
    discordant = max(2 * p * (1 - p), 1e-9)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    return math.ceil((z / max(max_drop, 1e-9)) ** 2 * discordant)


def set_too_small(n_items: int, constraints: Constraints) -> str | None:
    """Why a set is refused for a relative sequential floor, or None: its search part (the
    items not held out for the confirmation) cannot pass, 9 times in 10, a candidate as
    accurate as the reference whose answers differ on even 2% of items, and the space has not
    said that identical answers are what it wants (`identical_answers_only`)."""
    floor = constraints.accuracy
    if not floor.enabled or floor.mode != "relative" or floor.test != "sequential":
        return None
    if floor.identical_answers_only:
        return None
    reach = _reach(n_items, constraints)
    if reach.reach is not None and reach.reach > 0:
        return None
    needed = items_to_pass(floor.max_drop, floor.confidence, 0.02)[1]
    held_out = f" ({reach.held_out} more held out to confirm the recommendation)"
    return (
        f"accuracy floor: {reach.search_items} items{held_out if reach.held_out else ''} cannot "
        f"pass a candidate whose answers differ "
        f"from the reference's: at max_drop {floor.max_drop:g}, confidence {floor.confidence:g}, "
        f"one as accurate that differs on 2% of items needs {needed:,.0f} items to pass 9 times "
        f"in 10 (`autotune evalset needs --max-drop {floor.max_drop:g} --confidence "
        f"{floor.confidence:g}`); use a larger set, or set "
        "constraints.accuracy.identical_answers_only: true if identical answers are what this "
        "space wants"
    )


def floor_warning(
    n_items: int, reference_accuracy: float, constraints: Constraints, *, evalset: str
) -> str | None:
    """A note when the set is too small for the relative floor's test, else None. Under the
    sequential floor it is the sentence `autotune evalset needs` prints for the same set and
    floor (autotune.accuracy.reach), with the command that prints it."""
    floor = constraints.accuracy
    if not floor.enabled or floor.mode != "relative":
        return None
    if floor.test == "sequential":
        reach = _reach(n_items, constraints)
        if reach.reach is not None and reach.reach >= 0.05:
            return None
        return (
            f"accuracy floor: {reach.sentence()}; others end undecided, and infeasible. "
            f"`{reach.command(evalset)}` says how many items a floor needs."
        )
    if floor.test != "bootstrap":
        return None
    needed = items_needed(reference_accuracy, floor.max_drop, floor.confidence)
    if n_items >= needed:
        return None
    return (
        f"accuracy floor: {n_items} items cannot show non-inferiority at max_drop "
        f"{floor.max_drop:g}: a candidate as accurate as the reference ({reference_accuracy:.3f}) "
        f"but answering some items differently needs about {needed} items for its "
        f"{floor.confidence:.0%} interval to exclude that drop; such candidates will be "
        "infeasible. Use a larger set (--evalset ocr-caption, or your own) or `test: point`."
    )


def _reach(n_items: int, constraints: Constraints) -> SetReach:
    """What the set decides at the space's floor, on the items its search floor reads."""
    from autotune.accuracy.confirm import holdout_size

    floor = constraints.accuracy
    return set_reach(
        n_items,
        max_drop=floor.max_drop,
        confidence=floor.confidence,
        held_out=holdout_size(floor, n_items),
    )


def infeasible_because(record: TrialRecord, constraints: Constraints) -> list[str]:
    """Why a trial (its record) misses each constraint it misses, in words."""
    values = record.constraints or {}
    reasons: list[str] = []
    floor = constraints.accuracy
    if values.get("accuracy", 0.0) > 0:
        accuracy = record.accuracy
        paired = record.paired_vs_reference or Paired()
        verdict = record.accuracy_floor
        if floor.mode == "absolute" and verdict is not None:
            reasons.append(_absolute_reason(accuracy, verdict, floor.min))
        elif floor.mode == "absolute":
            reasons.append(f"accuracy {_num(accuracy)} is under the floor {floor.min:g}")
        elif paired.test == "sequential":
            reasons.append(_sequential_reason(accuracy, paired, floor.max_drop))
        elif floor.test == "point":
            reasons.append(
                f"accuracy {_num(accuracy)} is {_num(-_diff(paired))} "
                f"under the reference's, more than the allowed drop of {floor.max_drop:g}"
            )
        else:
            reference = _num((accuracy or 0.0) - _diff(paired))
            confidence = floor.confidence if paired.confidence is None else paired.confidence
            reasons.append(
                f"accuracy {_num(accuracy)} vs reference {reference}; "
                f"{interval_label(confidence, 'bootstrap')} "
                "of the paired difference "
                f"[{_num(paired.ci_low, '+.3f')}, {_num(paired.ci_high, '+.3f')}] "
                f"does not exclude a drop of {floor.max_drop:g} with "
                f"{_count(paired)} items"
            )
    if values.get("memory", 0.0) > 0:
        reasons.append(
            f"peak memory {_num(record.figure('peak_memory_mib'), ',.0f')} MiB is over the "
            f"budget of {constraints.memory_budget_mib:,.0f} MiB"
        )
    if values.get("latency", 0.0) > 0:
        reasons.append(
            f"p95 latency {_num(record.figure('e2e_latency_p95_ms'), ',.0f')} ms is over the "
            f"SLO of {constraints.latency_slo_ms:,.0f} ms"
        )
    return reasons


def _diff(paired: Paired) -> float:
    return math.nan if paired.accuracy_diff is None else paired.accuracy_diff


def _count(judged: Paired | FloorVerdict) -> int | str:
    return "?" if judged.n_items is None else judged.n_items


def interval_label(confidence: float, test: str | None = "sequential") -> str:
    """What a recorded interval is, in words. The sequential floor's two ends are each a
    one-sided bound at `confidence` over all looks, so together they cover the mean with
    2 * confidence - 1 (two 95% ends: a 90% pair); a bootstrap interval is two-sided."""
    if test == "sequential":
        return (
            f"confidence sequence (each end a one-sided {confidence:.0%} bound, both ends "
            f"together {2 * confidence - 1:.0%})"
        )
    return f"{confidence:.0%} two-sided interval"


def _sequence(verdict: Paired | FloorVerdict, spec: str) -> str:
    """'confidence sequence (each end a one-sided 90% bound, both ends together 80%)
    [-0.300, -0.100]' from a recorded verdict."""
    low, high = _num(verdict.ci_low, spec), _num(verdict.ci_high, spec)
    confidence = 0.0 if verdict.confidence is None else verdict.confidence
    return f"{interval_label(confidence)} [{low}, {high}]"


def _sequential_reason(accuracy: float | None, paired: Paired, max_drop: float) -> str:
    reference = _num((accuracy or 0.0) - _diff(paired))
    n = _count(paired)
    sequence = _sequence(paired, "+.3f")
    if paired.decision == "undecided":
        return (
            f"undecided after {n} items: accuracy {_num(accuracy)} vs reference {reference}; "
            f"the {sequence} neither excludes nor shows a drop of {max_drop:g} (a larger set "
            "decides: `autotune evalset needs`)"
        )
    return (
        f"accuracy {_num(accuracy)} vs reference {reference} on the same {n} items; the "
        f"{sequence} shows a drop of more than {max_drop:g}"
    )


def _absolute_reason(accuracy: float | None, verdict: FloorVerdict, minimum: float) -> str:
    n = _count(verdict)
    sequence = _sequence(verdict, ".3f")
    if verdict.decision == "undecided":
        return (
            f"undecided after {n} items: accuracy {_num(accuracy)}; the {sequence} neither "
            f"excludes nor shows an accuracy under the floor {minimum:g}"
        )
    return (
        f"accuracy {_num(accuracy)} on {n} items: the {sequence} lies under the floor {minimum:g}"
    )


def _num(value: Any, spec: str = ".3f") -> str:
    if isinstance(value, (int, float)) and not math.isnan(float(value)):
        return format(value, spec)
    return "?"
