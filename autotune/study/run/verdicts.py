"""How a measured trial is judged: its constraint values and its answers against the
reference's, item by item."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.accuracy.confirm import (
    ConfirmRequest,
    confirm,
    confirm_request,
    study_holdout,
)
from autotune.accuracy.paired import PairedComparison, compare
from autotune.accuracy.reuse import floor_request
from autotune.accuracy.scoring import AccuracyReport
from autotune.accuracy.sequential import FloorLook
from autotune.engines.measurement import Measurement
from autotune.evalset.dataset import EvalSet
from autotune.records.stored import TrialRecord
from autotune.records.writer import write_trial
from autotune.space import SearchSpace
from autotune.study.results.select import CONFIRMATION, CONSTRAINT_NAMES


def constraint_values(
    space: SearchSpace,
    m: Measurement,
    paired: PairedComparison | None,
    *,
    same_answers: bool = False,
    absolute: FloorLook | None = None,
) -> dict[str, float]:
    """Constraint values (<= 0 is feasible) in CONSTRAINT_NAMES order.

    `same_answers`: every answer is the reference's, word for word; such a trial loses no
    accuracy whatever a small set's interval would allow, so it is never infeasible on it.
    `absolute`: the sequential floor's verdict on an absolute floor.
    """
    c = space.constraints
    values = dict.fromkeys(CONSTRAINT_NAMES, 0.0)
    if c.accuracy.enabled and m.accuracy is not None:
        if c.accuracy.mode == "absolute" and absolute is not None:
            margin = c.accuracy.min - absolute.ci_low
            values["accuracy"] = margin if absolute.decision == "feasible" else max(margin, 1e-6)
        elif c.accuracy.mode == "absolute":
            values["accuracy"] = c.accuracy.min - m.accuracy.accuracy
        elif same_answers:
            values["accuracy"] = -c.accuracy.max_drop
        elif paired is not None and paired.decision is not None:
            # The verdict decides; its margin only says by how much. An undecided trial
            # is infeasible whatever its interval's grid reads.
            margin = -c.accuracy.max_drop - paired.ci_low
            values["accuracy"] = margin if paired.decision == "feasible" else max(margin, 1e-6)
        elif paired is not None:
            diff = paired.ci_low if c.accuracy.test == "bootstrap" else paired.accuracy_diff
            values["accuracy"] = -c.accuracy.max_drop - diff
    if c.memory_budget_mib is not None and "peak_memory_mib" in m.figures:
        values["memory"] = m.figures["peak_memory_mib"] - c.memory_budget_mib
    if c.latency_slo_ms is not None and "e2e_latency_p95_ms" in m.figures:
        values["latency"] = m.figures["e2e_latency_p95_ms"] - c.latency_slo_ms
    return values


def record_constraints(trial: optuna.Trial, values: dict[str, float]) -> None:
    """Constraint values for the sampler (Optuna's set_constraint) and for our own readers.

    "deployable" (0 or 1) is given to the sampler too, so TPE learns where configurations
    that reproduce on the deploy target lie; feasibility reads the other three only.
    """
    write_trial(trial, TrialRecord.part(constraints=values))
    for name, value in values.items():
        trial.set_constraint(name, value)


def judge(
    accuracy: AccuracyReport, reference: AccuracyReport, space: SearchSpace, evalset: EvalSet
) -> PairedComparison:
    """Compare a candidate's answers with the reference's (all it has answered, its later
    stages included), item by item: under the sequential floor, its confidence sequence over
    the items in decision order."""
    return compare(
        accuracy.item_scores,
        reference.item_scores,
        candidate_passed=accuracy.item_passed,
        reference_passed=reference.item_passed,
        confidence=space.constraints.accuracy.confidence,
        sequence=floor_request(space, evalset, reference.item_scores),
    )


# The decision a trial records when its answers are the reference's, word for word: feasible
# whatever the floor's sequence could show on the set (constraint_values).
IDENTICAL = "identical answers"
# The search floor's decisions that pass a trial: its sequence, or identical answers.
FLOOR_PASSED = ("feasible", IDENTICAL)


def judge_paired(
    accuracy: AccuracyReport,
    reference: AccuracyReport,
    space: SearchSpace,
    evalset: EvalSet,
    *,
    same_answers: bool,
) -> PairedComparison:
    """`judge`, with the decision a trial whose every answer is the reference's records: it
    is feasible for that reason, not for what its sequence showed (often undecided on a set
    too small to show anything)."""
    paired = judge(accuracy, reference, space, evalset)
    if same_answers and paired.decision is not None and paired.decision != "feasible":
        return dataclasses.replace(paired, decision=IDENTICAL)
    return paired


def judge_absolute(
    accuracy: AccuracyReport, space: SearchSpace, evalset: EvalSet
) -> FloorLook | None:
    """The sequential floor's verdict on an absolute floor; None under another test."""
    floor = space.constraints.accuracy
    request = floor_request(space, evalset, None) if floor.mode == "absolute" else None
    return None if request is None else request.judge(accuracy.item_scores, with_interval=True)


def confirmation_request(
    study: optuna.Study,
    space: SearchSpace,
    evalset: EvalSet,
    *,
    batch: int,
    key: str,
    worker: int = 0,
    workers: int = 1,
) -> ConfirmRequest | None:
    """The confirmation a trial of output key `key` would run if the floor passes it, on the
    study's held-out slice, at level j = confirmation_index: its answers' rank among those
    the search floor passed on its worker, interleaved with the other `workers`' ranks. The
    search alone fixes j, never a confirmation's outcome nor which ones ran
    (autotune.accuracy.confirm)."""
    return confirm_request(
        space.constraints.accuracy,
        study_holdout(space, evalset),
        index=confirmation_index(study, key, worker=worker, workers=workers),
        batch=batch,
    )


def confirmation_index(study: optuna.Study, key: str, *, worker: int, workers: int) -> int:
    """j = workers * (r - 1) + worker + 1, r = floor_passed_rank on this worker: each worker
    takes its own residue of j, so two trials settling at once on two workers never share a
    level (autotune.accuracy.confirm). With one worker, j = r."""
    rank = floor_passed_rank(study, key, worker=worker, workers=workers)
    return workers * (rank - 1) + worker + 1


def floor_passed_rank(study: optuna.Study, key: str, *, worker: int = 0, workers: int = 1) -> int:
    """The rank (from 1) of output key `key` among those the search floor passed, in the
    order their trials completed; one past the last where it is not among them. With several
    `workers`, among those of worker `worker` and of earlier runs of one worker (no slot
    recorded): each worker's own sequence is serial, and starts past a one-worker history."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    done = sorted(
        trials, key=lambda t: (t.datetime_complete is None, t.datetime_complete, t.number)
    )
    keys: list[str] = []
    for trial in done:
        record = TrialRecord.of(trial)
        slot = record.owner.worker if record.owner is not None else None
        if workers > 1 and slot is not None and slot != worker:
            continue
        paired = record.paired_vs_reference
        passed = paired is not None and paired.decision in FLOOR_PASSED
        if passed and not record.is_reference and record.output_key not in keys:
            keys.append(str(record.output_key))
    return keys.index(key) + 1 if key in keys else len(keys) + 1


def identical_answers(
    predictions: Mapping[str, str], reference: Mapping[str, str], searched: Collection[str]
) -> bool:
    """Whether every answer is the reference's, word for word, on the same items of those
    `searched` (the search floor's order): the held-out items are left aside, as the floor
    never reads them, and the reference answers more of them than a trial whose
    confirmation decided sooner."""
    keep = set(searched)
    return {i: a for i, a in predictions.items() if i in keep} == {
        i: a for i, a in reference.items() if i in keep
    }


def confirmation_attrs(
    request: ConfirmRequest | None,
    paired: PairedComparison | None,
    accuracy: AccuracyReport | None,
    reference: AccuracyReport | None,
) -> dict[str, object]:
    """What a trial records of its confirmation: its verdict where the floor passed it and it
    answered the held-out items; nothing otherwise."""
    if request is None or paired is None or accuracy is None or reference is None:
        return {}
    if paired.decision not in FLOOR_PASSED:  # identical answers pass it too
        return {}
    reference_scores = reference.item_scores
    verdict = confirm(request, accuracy.item_scores, reference_scores)
    return {CONFIRMATION: verdict.to_dict()}


def confirmation_verdict(
    reused: dict[str, Any] | None,
    request: ConfirmRequest | None,
    paired: PairedComparison | None,
    accuracy: AccuracyReport | None,
    reference: AccuracyReport | None,
) -> dict[str, object]:
    """The trial's confirmation verdict: that of the trial whose answers it reuses, or its
    own (confirmation_attrs)."""
    if reused is not None:
        return dict(reused)
    return confirmation_attrs(request, paired, accuracy, reference)
