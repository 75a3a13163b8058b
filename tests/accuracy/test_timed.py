"""Accuracy timed, not judged: how many items a dummy-weights trial answers, and how long."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import create_trial

from autotune.accuracy.sequential import items_needed_to_pass, stage_sizes
from autotune.accuracy.timed import (
    TIMED_DISCORDANCE,
    TIMED_ITEMS,
    TIMED_NOTE,
    floor_items,
    items_to_time,
    timed_accuracy,
    timed_before,
)
from autotune.engines.session import accuracy_batch_size
from autotune.evalset.dataset import EvalSet, load_evalset
from autotune.space import AccuracyConstraint, load_space

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny-qwen3-vl"


def test_the_count_is_the_floors_median_to_pass_a_candidate_that_loses_nothing() -> None:
    median, p90, passed = items_needed_to_pass(
        max_drop=0.02, confidence=0.9, discordance=TIMED_DISCORDANCE, cap=3000
    )
    needed = items_to_time(0.02, 0.9, 3000)
    assert needed == round(median) and passed > 0.9
    assert needed < p90 < 3000  # the median: a typical trial, not the pool's sizing figure
    assert items_to_time(0.02, 0.9, 164) == 164  # never more than the pool


def test_items_run_through_the_floors_next_look_in_decision_order() -> None:
    order = [f"item-{k:04d}" for k in range(3000)]
    needed = items_to_time(0.02, 0.9, 3000)
    for batch in (1, 8, 32, 64):
        looks = stage_sizes(3000, first=20, batch=batch)
        ids = floor_items(order, needed=needed, batch=batch)
        assert len(ids) in looks and len(ids) >= needed
        assert looks[looks.index(len(ids)) - 1] < needed  # the first look past it, no later
        assert ids == order[: len(ids)]


def test_each_answer_is_its_expected_answer_in_served_tokens_plus_the_end() -> None:
    evalset = load_evalset("ocr-caption")
    timed = timed_accuracy(
        AccuracyConstraint(max_drop=0.3), screening_items=0, evalset=evalset, model_path=str(TINY)
    )
    by_id = {item.id: item for item in evalset.items}
    # The tiny model's tokenizer is character-level: one token per character.
    assert all(n == len(by_id[i].answers[0]) + 1 for i, n in timed.lengths.items())
    trial = timed.trial_pass(batch=8, max_new_tokens=16, reference=False)
    # The searched items in decision order (without the held-out slice), then the slice's.
    assert list(timed.order) == [i for i in evalset.decision_order() if i not in timed.held_out]
    searched = [i for i in trial.order if i not in timed.held_out]
    assert searched == list(timed.order[: len(searched)])
    assert len(searched) >= timed.needed  # type: ignore[operator]
    assert trial.stages[-1] == len(trial.order)
    assert all(n == min(len(by_id[i].answers[0]) + 1, 16) for i, n in trial.lengths.items())
    assert max(trial.lengths.values()) == 16  # a document's transcription, capped
    assert timed.note().startswith(TIMED_NOTE)


def test_a_floor_that_answers_every_item_times_every_item() -> None:
    evalset = load_evalset("smoke")
    for floor in (
        AccuracyConstraint(test="bootstrap"),
        AccuracyConstraint(mode="absolute", min=0.5),
        AccuracyConstraint(enabled=False),
    ):
        timed = timed_accuracy(floor, screening_items=12, evalset=evalset, model_path=str(TINY))
        assert timed.needed is None and timed.reference_stages(8) == [len(evalset)]
        for reference in (False, True):  # the reference too: one stage of every item
            trial = timed.trial_pass(batch=8, max_new_tokens=16, reference=reference)
            assert trial.screening_items == 0
            assert trial.order == evalset.decision_order() and trial.stages == [len(evalset)]


def test_screening_items_come_first_for_candidates_only() -> None:
    evalset = load_evalset("smoke")
    timed = timed_accuracy(
        AccuracyConstraint(max_drop=0.3), screening_items=12, evalset=evalset, model_path=str(TINY)
    )
    candidate = timed.trial_pass(batch=4, max_new_tokens=16, reference=False)
    reference = timed.trial_pass(batch=4, max_new_tokens=16, reference=True)
    assert candidate.screening_items == 12 and candidate.stages[0] == 20
    assert reference.screening_items == 0


def test_a_trial_also_answers_what_its_confirmation_would_on_the_held_out_slice() -> None:
    """A candidate the floor passes answers the held-out slice too, so the timed pass goes on
    into it, in the confirmation's looks; the search's items never include the slice."""
    evalset = load_evalset("smoke")
    floor = AccuracyConstraint(max_drop=0.3, confirmation={"items": 60})
    timed = timed_accuracy(floor, screening_items=0, evalset=evalset, model_path=str(TINY))
    held = evalset.decision_order()[-60:]
    assert timed.held_out == tuple(held) and not set(held) & set(timed.order)
    assert 0 < timed.confirm_needed <= 60
    trial = timed.trial_pass(batch=8, max_new_tokens=16, reference=False)
    searched = [i for i in trial.order if i not in held]
    confirming = trial.order[len(searched) :]
    assert trial.order[: len(searched)] == searched  # the search's items first
    assert confirming == held[: len(confirming)] and len(confirming) >= timed.confirm_needed
    assert trial.stages[-1] == len(trial.order) and len(searched) in trial.stages
    # The reference answers the slice only when a candidate's confirmation asks for it.
    reference = timed.trial_pass(batch=8, max_new_tokens=16, reference=True)
    assert not set(reference.order) & set(held)
    assert f"then the {timed.confirm_needed} of the 60 held-out items" in timed.note()
    off = AccuracyConstraint(max_drop=0.3, confirmation={"enabled": False})
    unconfirmed = timed_accuracy(off, screening_items=0, evalset=evalset, model_path=str(TINY))
    assert unconfirmed.held_out == () and "held-out" not in unconfirmed.note()


def test_a_candidates_pass_is_split_at_its_load_test_as_a_real_study_answers_it() -> None:
    """Screening around the load test (the engine's part); the floor's rest after it, where
    the trial is judged; the held-out items last, where it sets the record."""
    evalset = load_evalset("smoke")
    floor = AccuracyConstraint(max_drop=0.3, confirmation={"items": 60})
    timed = timed_accuracy(floor, screening_items=12, evalset=evalset, model_path=str(TINY))
    full = timed.trial_pass(batch=4, max_new_tokens=16, reference=False)
    engine, rest = timed.deferred(full)
    assert engine.order == full.order[:12] and engine.screening_items == 12
    assert engine.stages == [12] and set(engine.lengths) == set(engine.order)
    assert engine.order + rest.floor + rest.confirm == full.order
    held = set(evalset.decision_order()[-60:])
    assert rest.confirm and set(rest.confirm) <= held and not set(rest.floor) & held
    assert all(rest.lengths[i] == full.lengths[i] for i in rest.floor + rest.confirm)


def test_only_a_whole_timed_pass_counts_as_timed_before() -> None:
    study = optuna.create_study(direction="maximize")

    def timed(key: str, **attrs: object) -> None:
        attrs = {"output_key": key, TIMED_ITEMS: 80.0, **attrs}
        study.add_trial(create_trial(values=[1.0], user_attrs=attrs))

    timed("a", accuracy_not_judged={"reason": "memory"})  # its screening alone
    timed("b", confirmation_skipped={"confirmed_trial": 0, "words": "slower"})  # no held-out
    timed("c")
    assert not timed_before(study, "a") and not timed_before(study, "b")
    assert timed_before(study, "c") and not timed_before(study, "d")


def _pool(size: int) -> EvalSet:
    """A set of `size` items shaped like the default space's pool (its length and ids matter;
    the answers, for their lengths, are the bundled set's)."""
    base = load_evalset("ocr-caption")
    items = [
        base.items[k % len(base.items)].model_copy(update={"id": f"i{k}"}) for k in range(size)
    ]
    return EvalSet.model_construct(name="ocr-caption-3k", path=base.path, items=items)


def test_the_timed_reference_answers_a_real_references_first_stage_and_no_more() -> None:
    """Issue 53: a dummy-weights study's reference answers in the stages a real study's does
    (autotune.accuracy.reuse.reference_stages, on the floor the timed pass stands for): its
    trial times the first only, and a candidate's timed floor reaches past it, so the
    reference is extended as a real one is."""
    from autotune.accuracy.reuse import reference_stages

    default, pool = load_space("default"), _pool(3000)
    floor = default.constraints.accuracy
    timed = timed_accuracy(
        floor, screening_items=default.screening.items, evalset=pool, model_path=str(TINY)
    )
    batch = accuracy_batch_size(default, default.reference_config())
    stages = timed.reference_stages(batch)
    assert stages == reference_stages(default, pool, batch=batch)
    assert len(stages) > 1 and stages[-1] == len(timed.order)
    reference = timed.trial_pass(batch=batch, max_new_tokens=128, reference=True)
    assert reference.order == list(timed.order[: stages[0]])  # no held-out item up front
    assert reference.stages[-1] == len(reference.order) == stages[0]
    assert reference.screening_items == 0
    candidate = timed.trial_pass(batch=batch, max_new_tokens=128, reference=False)
    searched = [i for i in candidate.order if i not in timed.held_out]
    assert len(searched) > stages[0]  # its floor asks the reference for its next stages
    assert searched[: stages[0]] == reference.order
