"""The reference's answers (autotune.study.run.reference_load): it answers the floor's items a
stage at a time, the same answers as in one pass (the bundled model)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from small_space import LOOP_WORKLOAD, run_study, small_evalset, small_space

from autotune.engines import open_session
from autotune.errors import TrialFailure
from autotune.records.reference import study_extensions
from autotune.space import load_space
from autotune.study.plan import plan_study
from autotune.study.results.progress import Progress
from autotune.study.run.launches import LaunchScheduler
from autotune.study.run.reference_load import (
    ReferenceStages,
    answers_only,
    extend_next_stage,
    extend_or_note,
    how_answered,
)


@pytest.mark.slow  # a study on the bundled model, then the reference launched twice more
def test_the_reference_s_staged_answers_are_the_ones_it_gives_in_one_pass(tmp_path: Path) -> None:
    evalset = small_evalset(tmp_path / "pool", n_text=40, n_shapes=8)
    # A loose floor: a candidate answering as the reference passes after a few items, so
    # the reference answers a few of the floor's stages of 48 items up front, the rest later.
    space_file = small_space(
        tmp_path,
        trials=1,
        evalset=str(evalset),
        workload={**LOOP_WORKLOAD, "accuracy_batch_size": 4},
        constraints={
            "accuracy": {"mode": "relative", "max_drop": 0.2, "confirmation": {"enabled": False}}
        },
    )
    result, study = run_study(space_file, study="staged", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    plan = plan_study(
        load_space(str(space_file)),
        study_name="staged",
        storage_url=f"sqlite:///{tmp_path / 'staged.db'}",
    )
    printed = io.StringIO()
    progress = Progress(total=1, console=Console(file=printed, width=200))
    stages = ReferenceStages(plan, LaunchScheduler(plan), progress)
    order = plan.evalset.decision_order()
    first, second, *_ = stages.stages
    assert stages.stages[-1] == 48 and second < 48
    reference = study.get_trials()[0]
    assert reference.user_attrs["answers_computed"] == first
    assert f"reference: {first} of 48 items answered (stage 1)" in result.stderr

    # The floor's next stage, then the rest, each answered by a fresh launch of the
    # reference at its batch of 4 (what a candidate undecided at its end asks for).
    stages.answers_for(study, order[:second], for_trial=7)
    scores = stages.answers_for(study, order, for_trial=None)
    assert set(scores.item_scores) == set(order)
    said = printed.getvalue()
    assert (
        f"reference: {second} of 48 items answered (stage 2: {second - first} more for trial 7"
        in said
    )
    assert (
        f"reference: 48 of 48 items answered (stage {len(stages.stages)}: {48 - second} more in"
        in said
    )
    extensions, problems = study_extensions(study)
    assert problems == [] and len(extensions) == 2
    added = extensions[0]
    assert (added.stage, added.answered_items, added.computed) == (2, second, second - first)
    assert (added.for_trial, added.batch_size) == (7, 4) and added.seconds > 0
    assert set(added.predictions) == set(order[first:second])
    assert extensions[1].cache_entry is None  # computed, none from the cache
    staged = stages.answers(study)
    assert staged is not None

    # The same reference answering all 48 items in one pass, one at a time.
    config = plan.space.reference_config()
    session = open_session(plan.space, config, model_path=plan.model_path, evalset=plan.evalset)
    try:
        one_pass = answers_only(plan.space, config, order).model_copy(
            update={"accuracy_batch_size": 1}
        )
        unstaged = session.measure(config, one_pass).predictions
    finally:
        session.close()
    assert {i: staged.predictions[i] for i in order} == {i: unstaged[i] for i in order}


class _Stages:
    """What extend_or_note and extend_next_stage use of ReferenceStages: its order, its
    stages, its progress lines and an extension that stores `adds` items or fails."""

    def __init__(self, answered: int, *, adds: int, fails: bool = False) -> None:
        self.order = [f"i{n}" for n in range(12)]
        self.predictions = dict.fromkeys(self.order[:answered], "a")
        self.adds, self.fails, self.notes, self.asked = adds, fails, [], []

    def next_stage(self, answered: int) -> int:
        return answered + 4

    def extend(self, study: object, ids: list[str], *, for_trial: int) -> None:
        self.asked.append(ids)
        if self.fails:
            raise TrialFailure("the reference's launch failed", kind="crash")
        self.predictions |= dict.fromkeys(ids[: self.adds], "a")

    def answers(self, study: object) -> SimpleNamespace:
        return SimpleNamespace(predictions=self.predictions)

    @property
    def progress(self) -> SimpleNamespace:
        return SimpleNamespace(note=self.notes.append)


def test_the_next_stage_is_asked_for_and_a_stage_that_added_nothing_stops_the_asking() -> None:
    grows = _Stages(4, adds=4)
    assert extend_next_stage(grows, None, 4, for_trial=3, without="is timed without them")
    assert grows.asked == [["i4", "i5", "i6", "i7"]] and not grows.notes
    stuck = _Stages(4, adds=0)
    assert not extend_next_stage(stuck, None, 4, for_trial=3, without="is timed without them")


def test_an_extension_that_fails_is_one_line_saying_what_the_trial_does_without() -> None:
    failing = _Stages(4, adds=4, fails=True)
    without = "is judged on the 4 it has answered"
    assert not extend_next_stage(failing, None, 4, for_trial=7, without=without)
    assert failing.notes == [
        "reference: could not answer more items (the reference's launch failed); trial 7 "
        "is judged on the 4 it has answered"
    ]
    assert not extend_or_note(failing, None, ["i9"], for_trial=7, without="is timed without them")


def test_an_extension_says_how_its_items_were_answered() -> None:
    assert how_answered(128, 0, 41.2) == " in 41 s"
    assert how_answered(128, 20, 41.2) == " in 41 s; 20 of them from the answers cache"
    # Nothing was answered: no time to give, and no "45 more in 0 s; 45 from the cache".
    assert how_answered(45, 45, 0.01) == ", all from the answers cache"
