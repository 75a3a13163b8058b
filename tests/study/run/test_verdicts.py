"""A trial judged against the reference: the decision it records, and the level its
confirmation is tested at."""

from __future__ import annotations

import random
from pathlib import Path

import optuna
from optuna.trial import create_trial
from small_space import small_space

from autotune.accuracy.confirm import Holdout, confirm_request, level
from autotune.accuracy.scoring import AccuracyReport
from autotune.evalset.dataset import EvalSet, load_evalset
from autotune.space import SearchSpace, load_space
from autotune.study.run.verdicts import (
    CONFIRMATION,
    IDENTICAL,
    confirmation_attrs,
    confirmation_index,
    floor_passed_rank,
    identical_answers,
    judge_paired,
)


def _same_answers(tmp_path: Path) -> tuple[SearchSpace, EvalSet, AccuracyReport, AccuracyReport]:
    """The small space and set, and a trial's report the reference's, item for item."""
    space = load_space(str(small_space(tmp_path)))
    evalset = load_evalset(space.resolve_path(space.evalset))
    ids = [item.id for item in evalset.items]
    scores = {i: float(n % 2) for n, i in enumerate(ids)}
    passed = {i: bool(v) for i, v in scores.items()}
    report = AccuracyReport(0.5, {}, dict(scores), dict(passed))
    reference = AccuracyReport(0.5, {}, dict(scores), dict(passed))  # the reference's answers
    return space, evalset, report, reference


def test_identical_answers_record_that_as_their_decision(tmp_path: Path) -> None:
    space, evalset, report, reference = _same_answers(tmp_path)
    # 8 items: the sequence cannot show anything, so the floor alone is undecided.
    alone = judge_paired(report, reference, space, evalset, same_answers=False)
    assert alone.decision == "undecided"
    same = judge_paired(report, reference, space, evalset, same_answers=True)
    assert same.decision == IDENTICAL == "identical answers"
    assert same.to_dict()["decision"] == IDENTICAL


def _passed_trial(study: optuna.Study, key: str, decision: str, **attrs: object) -> None:
    paired = {"decision": decision, "test": "sequential"}
    attrs = {"output_key": key, "paired_vs_reference": paired, **attrs}
    study.add_trial(create_trial(values=[1.0], user_attrs=attrs))


def test_a_confirmations_level_is_its_answers_rank_among_those_the_floor_passed() -> None:
    study = optuna.create_study(direction="maximize")
    _passed_trial(study, "ref", "feasible", is_reference=True)  # the reference ranks not
    assert floor_passed_rank(study, "a") == 1
    _passed_trial(study, "a", "feasible", confirmation={"decision": "not confirmed"})
    _passed_trial(study, "b", "infeasible")  # the floor refused it
    # Passed, its confirmation skipped (slower): it still takes its rank, fixed by the search.
    _passed_trial(study, "c", IDENTICAL, confirmation_skipped={"confirmed_trial": 0})
    _passed_trial(study, "a", "feasible")  # the same answers again share their rank
    assert [floor_passed_rank(study, k) for k in ("a", "c", "b", "d")] == [1, 2, 3, 3]


def _on_worker(study: optuna.Study, key: str, worker: int | None) -> None:
    """A trial the floor passed, completed on `worker` (None: a run of one worker)."""
    owner = {"host": "h", "pid": 1} | ({} if worker is None else {"worker": worker})
    _passed_trial(study, key, "feasible", owner=owner)


def test_two_workers_settling_at_once_never_share_a_level() -> None:
    study = optuna.create_study(direction="maximize")
    _passed_trial(study, "ref", "feasible", is_reference=True)
    # Both settle before either completes: a rank over the whole study gives both 1.
    assert floor_passed_rank(study, "a") == floor_passed_rank(study, "b") == 1
    first = confirmation_index(study, "a", worker=0, workers=2)
    second = confirmation_index(study, "b", worker=1, workers=2)
    assert (first, second) == (1, 2)
    _on_worker(study, "b", 1)  # completed in the other order: nothing moves
    _on_worker(study, "a", 0)
    assert confirmation_index(study, "a", worker=0, workers=2) == 1  # its own rank kept
    assert confirmation_index(study, "c", worker=0, workers=2) == 3
    assert confirmation_index(study, "d", worker=1, workers=2) == 4
    # The same answers on the other worker are a test of their own, at a level of their own.
    assert confirmation_index(study, "a", worker=1, workers=2) == 4


def test_one_worker_takes_levels_one_two_three_as_before() -> None:
    study = optuna.create_study(direction="maximize")
    _passed_trial(study, "ref", "feasible", is_reference=True)
    levels = []
    for key in ("a", "b", "c"):
        levels.append(confirmation_index(study, key, worker=0, workers=1))
        _on_worker(study, key, None)
    assert levels == [1, 2, 3]
    assert [floor_passed_rank(study, k) for k in ("a", "b", "c")] == [1, 2, 3]


def test_workers_start_past_a_one_worker_history() -> None:
    study = optuna.create_study(direction="maximize")
    for key in ("a", "b"):  # levels 1 and 2, from a run of one worker
        _on_worker(study, key, None)
    assert confirmation_index(study, "c", worker=0, workers=2) == 5
    assert confirmation_index(study, "d", worker=1, workers=2) == 6


def test_levels_stay_distinct_and_under_alpha_however_workers_interleave() -> None:
    """Three workers, each settling (its level taken) then completing, in a seeded random
    order: no two answer sets share a level, and their levels sum to at most alpha."""
    rng = random.Random(7)
    alpha = 0.1
    study = optuna.create_study(direction="maximize")
    taken: dict[str, int] = {}
    settled: dict[int, str] = {}
    for step in range(90):
        worker = rng.randrange(3)
        if worker in settled:
            _on_worker(study, settled.pop(worker), worker)
            continue
        key = f"k{step}"
        taken[key] = confirmation_index(study, key, worker=worker, workers=3)
        settled[worker] = key
    assert len(set(taken.values())) == len(taken) > 20
    assert sum(level(alpha, j) for j in taken.values()) <= alpha


def test_identical_answers_leave_the_held_out_aside() -> None:
    reference = {"s1": "x", "s2": "y", "h1": "z", "h2": "w"}
    searched = ["s1", "s2"]  # the search floor's order: h1 and h2 are held out
    assert identical_answers({"s1": "x", "s2": "y", "h1": "n"}, reference, searched)
    assert not identical_answers({"s1": "x", "s2": "n"}, reference, searched)
    assert not identical_answers({"s1": "x"}, reference, searched)  # fewer items
    assert not identical_answers({"s1": "x", "s2": "y"}, reference, [*searched, "h1", "h2"])


def test_a_trial_passed_on_identical_answers_is_confirmed(tmp_path: Path) -> None:
    space, evalset, report, reference = _same_answers(tmp_path)
    ids = [item.id for item in evalset.items]
    request = confirm_request(space.constraints.accuracy, Holdout.of(ids, 4), index=1)
    same = judge_paired(report, reference, space, evalset, same_answers=True)
    assert same.decision == IDENTICAL
    verdict = confirmation_attrs(request, same, report, reference).get(CONFIRMATION)
    assert isinstance(verdict, dict)
    assert (verdict["index"], verdict["holdout_items"]) == (1, 4)
    undecided = judge_paired(report, reference, space, evalset, same_answers=False)
    assert confirmation_attrs(request, undecided, report, reference) == {}
