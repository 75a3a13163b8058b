"""Accuracy timed, not judged: a dummy-weights study's accuracy pass, run for its time alone.

Random weights answer noise, so a dummy-weights study judges nothing (checkpoints.dummy). A
real study still spends time answering the pool; a speed study that skipped it showed a time
split, a budget and racing no real study has. So each trial answers what the floor would ask:

- how many: the items the sequential floor spends to pass a candidate that loses nothing and
  answers unlike the reference on TIMED_DISCORDANCE of them: the median of
  `items_needed_to_pass` (the typical trial, as the budget's medians), up to the floor's next
  look, from the pool in decision order and in the floor's stages. A floor that answers every
  item (bootstrap, point, none) or whose count depends on the accuracy (absolute) times all.
- and its confirmation: where it is faster than every trial that timed one (or the reference),
  the median held-out items the first confirmation spends for that same candidate
  (autotune.accuracy.confirm); the search's items come from the pool without the slice.
- the reference: a real study's stages, extended when a candidate reaches past them.
- when: screening before the load test, the rest after it, none over the memory budget or the
  latency SLO (autotune.study.run.accuracy_gate; a timed pass counts as one the floor passed).
- how long: the item's expected answer (its first) in the served tokenizer's tokens, at least
  1, plus the end token a real model stops with, capped by the trial's max_new_tokens; forced
  as a load test forces its lengths (autotune.export.forced_length; in process min_new_tokens).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import TrialState
from pydantic import BaseModel, ConfigDict, Field

from autotune.accuracy.confirm import Holdout, holdout_size, level
from autotune.accuracy.reuse import FIRST_STAGE_ITEMS, staged_reference
from autotune.accuracy.sequential import items_needed_to_pass, stage_sizes
from autotune.evalset.dataset import EvalSet
from autotune.records.stored import TrialRecord
from autotune.space import AccuracyConstraint

# The share of items on which a passing candidate answers unlike the reference (one right,
# the other wrong): greedy decoding on another engine's kernels, as the default space's are.
TIMED_DISCORDANCE = 0.05
TIMED_NOTE = "accuracy timed, not judged: dummy weights"
# What a trial records of its timed pass: the items it answered and their tokens in all (each
# answer's tokens are a field of its record: TrialRecord.accuracy_timed_tokens).
TIMED_ITEMS = "accuracy_timed_items"
TIMED_ANSWER_TOKENS = "accuracy_timed_answer_tokens"
TOKENIZER_FILE = "tokenizer.json"


class TimedPass(BaseModel):
    """One trial's timed accuracy pass, as its engine runs it (sent in the MeasurePlan)."""

    model_config = ConfigDict(extra="forbid")

    order: list[str] = Field(description="The items to answer, in decision order.")
    stages: list[int] = Field(description="Items answered by each look; the last is len(order).")
    screening_items: int = Field(0, description="Items answered before the load test.")
    lengths: dict[str, int] = Field(description="Each item's forced answer length, in tokens.")


@dataclass(frozen=True)
class TimedRest:
    """What a candidate answers after its load test (autotune.study.run.accuracy_gate): the
    floor's items past screening inside its limits, then the held-out items where it is
    faster than every trial that timed them, each forced to its length."""

    floor: list[str]
    confirm: list[str]
    lengths: dict[str, int]


@dataclass(frozen=True)
class TimedAccuracy:
    """A study's timed accuracy pass: the pool's order, how many items a trial answers and
    each item's answer length before the trial's max_new_tokens caps it."""

    order: tuple[str, ...]  # the searched items, in decision order
    needed: int | None  # items the sequential floor spends; None: every item
    screening_items: int
    lengths: dict[str, int]
    held_out: tuple[str, ...] = ()  # the confirmation's slice, in decision order
    confirm_needed: int = 0  # items the first confirmation spends (median)
    max_drop: float = 0.0  # the floor's, which sizes the reference's stages
    confidence: float = 0.0

    def note(self) -> str:
        """What the study's notes say about it."""
        count = (
            f"the {self.needed} items the sequential floor spends to pass a candidate that "
            f"loses nothing at {TIMED_DISCORDANCE:.0%} discordance (median), up to its next look"
            if self.needed is not None
            else "every item, as this floor answers"
        )
        confirm = (
            f", then the {self.confirm_needed} of the {len(self.held_out)} held-out items the "
            "first confirmation spends (median)"
            if self.held_out
            else ""
        )
        return (
            f"{TIMED_NOTE}: each candidate answers {count} of {len(self.order)}{confirm}, the "
            "reference its first stage and the rest when a candidate's items reach past it, each "
            "answer forced to its expected answer's length in the served tokenizer's tokens + 1 "
            "(end), capped by max_new_tokens; no verdict, constraint or screening verdict"
        )

    def reference_stages(self, batch: int) -> list[int]:
        """The reference's stages at its accuracy batch `batch`, as a real study's: the first
        answered by its trial, each next one when a candidate needs it; every item at once
        where the floor answers every item."""
        if self.needed is None:
            return [len(self.order)]
        return staged_reference(
            len(self.order),
            screening=self.screening_items,
            max_drop=self.max_drop,
            confidence=self.confidence,
            batch=batch,
        )

    def trial_pass(self, *, batch: int, max_new_tokens: int, reference: bool) -> TimedPass:
        """The pass of one trial: the reference's first stage (`reference_stages`: the rest,
        held-out items included, come as candidates ask for them), or a candidate's floor
        items, screening's first as the floor would answer them, then its confirmation's."""
        if reference:
            ids = list(self.order[: self.reference_stages(batch)[0]])
            screening = 0
        else:
            ids = floor_items(
                self.order, needed=self.needed, batch=batch, screening=self.screening_items
            )
            screening = self.screening_items if self.needed is not None else 0
        stages = [
            size
            for size in _stages(len(self.order), self.needed, batch, screening)
            if size < len(ids)
        ]
        stages.append(len(ids))
        confirming = self._confirming(batch) if not reference else ([], [])
        stages += [len(ids) + size for size in confirming[1]]
        ids += confirming[0]
        return TimedPass(
            order=ids,
            stages=stages,
            screening_items=min(screening, len(ids)),
            lengths={i: min(self.lengths[i], max_new_tokens) for i in ids},
        )

    def deferred(self, full: TimedPass) -> tuple[TimedPass, TimedRest]:
        """A candidate's pass `full` split as a real study answers it: its screening around
        the load test (the engine's pass), and the rest after it (TimedRest)."""
        held = set(self.held_out)
        screening = full.order[: full.screening_items]
        engine = TimedPass(
            order=screening,
            stages=[len(screening)],
            screening_items=len(screening),
            lengths={i: full.lengths[i] for i in screening},
        )
        rest = TimedRest(
            floor=[i for i in full.order[len(screening) :] if i not in held],
            confirm=[i for i in full.order if i in held],
            lengths=full.lengths,
        )
        return engine, rest

    def _confirming(self, batch: int) -> tuple[list[str], list[int]]:
        """The held-out items a passed candidate answers, through the confirmation's look at
        or past `confirm_needed`, and those looks (the reference answers them when asked)."""
        if not self.held_out or self.confirm_needed <= 0:
            return [], []
        ids = floor_items(self.held_out, needed=self.confirm_needed, batch=batch)
        looks = _stages(len(self.held_out), self.confirm_needed, batch, screening=0)
        return ids, [size for size in looks if size <= len(ids)]


def _stages(pool: int, needed: int | None, batch: int, screening: int) -> list[int]:
    if needed is None:
        return [pool]
    return stage_sizes(pool, first=max(screening, FIRST_STAGE_ITEMS), batch=batch)


def floor_items(
    order: tuple[str, ...] | list[str], *, needed: int | None, batch: int, screening: int = 0
) -> list[str]:
    """The prefix of `order` a candidate answers: through the first of the floor's looks at
    or past `needed` items (None: all of them)."""
    if needed is None:
        return list(order)
    stages = _stages(len(order), needed, batch, screening)
    return list(order[: next(size for size in stages if size >= min(needed, len(order)))])


def timed_text(tokens: int) -> str:
    """What the answers cache and the reference's extensions keep of a timed answer: its
    length, never a text (random weights answer noise)."""
    return f"<timed: {tokens} tokens>"


@functools.cache
def items_to_time(max_drop: float, confidence: float, pool: int) -> int:
    """The median items the sequential floor spends to pass a candidate that loses nothing
    at TIMED_DISCORDANCE, at most the pool."""
    median, _, _ = items_needed_to_pass(
        max_drop=max_drop, confidence=confidence, discordance=TIMED_DISCORDANCE, cap=pool
    )
    return min(pool, max(1, round(median)))


def answer_lengths(evalset: EvalSet, tokenizer_file: Path) -> dict[str, int]:
    """Each item's expected answer (its first) in the tokenizer's tokens, at least 1, plus
    the end token."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    answers = [item.answers[0] for item in evalset.items]
    encoded = tokenizer.encode_batch(answers, add_special_tokens=False)
    return {
        item.id: max(1, len(tokens.ids)) + 1
        for item, tokens in zip(evalset.items, encoded, strict=True)
    }


def timed_accuracy(
    floor: AccuracyConstraint, *, screening_items: int, evalset: EvalSet, model_path: str
) -> TimedAccuracy:
    """The timed pass of a study whose space has `floor` and `screening_items`, on `evalset`,
    served by the checkpoint at `model_path` (its tokenizer counts the answers)."""
    pool = evalset.decision_order()
    holdout = Holdout.of(pool, holdout_size(floor, len(pool)))
    order = tuple(holdout.search_order(pool))
    sequential = floor.enabled and floor.test == "sequential" and floor.mode == "relative"
    needed = items_to_time(floor.max_drop, floor.confidence, len(order)) if sequential else None
    return TimedAccuracy(
        order=order,
        needed=needed,
        screening_items=screening_items if sequential and screening_items < len(order) else 0,
        lengths=answer_lengths(evalset, Path(model_path) / TOKENIZER_FILE),
        held_out=tuple(holdout.ids),
        confirm_needed=(
            items_to_time(floor.max_drop, 1 - level(1 - floor.confidence, 1), len(holdout.ids))
            if holdout.ids
            else 0
        ),
        max_drop=floor.max_drop,
        confidence=floor.confidence,
    )


def timed_before(study: optuna.Study, key: str) -> bool:
    """Whether a completed trial with the same answers key (autotune.accuracy.reuse) timed its
    pass: a real study would reuse those answers, so this trial answers nothing. A pass cut
    short counts not: one not judged timed its screening alone, one not confirmed skipped its
    held-out items (autotune.study.run.accuracy_gate), which a later trial with the same key
    may still have to answer."""
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        record = TrialRecord.of(trial)
        timed = record.figure(TIMED_ITEMS) is not None
        whole = record.accuracy_not_judged is None and record.confirmation_skipped is None
        if record.output_key == key and timed and whole:
            return True
    return False


def timed_study(study: optuna.Study) -> bool:
    """Whether any trial of `study` timed an accuracy pass (dummy weights)."""
    return any(
        TrialRecord.of(trial).figure(TIMED_ITEMS) is not None
        for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    )
