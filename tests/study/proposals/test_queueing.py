"""The reference first, and one of each: what a run queues (autotune.study.proposals.queueing).

The storage states are the ones an interrupted run, a killed --gpus coordinator or a second run
on the same study leave behind, written into a real SQLite study; `prepare_study` is the code
`autotune run` runs before its trials. tests/study/proposals/test_interrupted_reference.py
checks the same with real processes and a real Ctrl-C.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from small_space import small_space

from autotune.records.stored import TrialRecord
from autotune.space import load_space
from autotune.study.plan import StudyPlan, plan_study
from autotune.study.proposals.queueing import (
    QUEUED_AS,
    queue_baseline_when_due,
    queue_reference_and_candidates,
)
from autotune.study.results.counting import SURPLUS, trial_counts
from autotune.study.results.progress import Progress
from autotune.study.run.budget import start_fits
from autotune.study.start.opening import prepare_study

CANDIDATES = [
    {"name": "batch-2", "config": {"batch_size": 2}},
    {"name": "side-128", "config": {"image_max_side": 128}},
]
PARAMS = {"batch_size": {"choices": [1, 2]}, "image_max_side": {"choices": [None, 128]}}


@pytest.fixture
def plan(tmp_path: Path) -> StudyPlan:
    # Without steps, a run queues every named candidate up front (with them, the first only:
    # autotune.study.proposals.queueing), as the studies of issue 39 did.
    space = small_space(
        tmp_path, name="q", candidates=CANDIDATES, params=PARAMS, sampler={"steps": False}
    )
    return plan_study(load_space(str(space)), storage_url=f"sqlite:///{tmp_path}/q.db")


def prepare(plan: StudyPlan, target: int = 6) -> optuna.Study:
    progress = Progress(total=target, quiet=True)
    study = prepare_study(plan, target, progress, fits=start_fits(plan, progress))
    assert study is not None
    return study


def queue(study: optuna.Study) -> list[tuple[bool, str | None]]:
    """The waiting trials in the order Optuna hands them out: (is_reference, candidate)."""
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    return [(TrialRecord.of(t).is_reference, TrialRecord.of(t).candidate) for t in waiting]


FIRST_QUEUE = [(True, None), (False, "batch-2"), (False, "side-128")]


def start(study: optuna.Study, number: int) -> None:
    """Trial `number` taken by a run, as Optuna takes a waiting trial."""
    assert study._storage.set_trial_state_values(study.trials[number]._trial_id, TrialState.RUNNING)


def end(study: optuna.Study, number: int, kind: str) -> None:
    trial_id = study.trials[number]._trial_id
    study._storage.set_trial_user_attr(trial_id, "failure_kind", kind)
    study._storage.set_trial_user_attr(trial_id, "failure_reason", f"{kind} (test)")
    study._storage.set_trial_state_values(trial_id, TrialState.FAIL)


def test_an_interrupted_reference_is_queued_before_the_candidates_queued_with_it(
    plan: StudyPlan,
) -> None:
    study = prepare(plan)
    assert queue(study) == FIRST_QUEUE
    start(study, 0)
    end(study, 0, "interrupted")  # Ctrl-C in the reference: the candidates still wait

    study = prepare(plan)
    assert queue(study) == FIRST_QUEUE  # the reference first again, both candidates behind
    stale = study.trials[1:3]
    assert [t.state for t in stale] == [TrialState.FAIL] * 2
    for trial, name in zip(stale, ("batch-2", "side-128"), strict=True):
        record = TrialRecord.of(trial)
        assert (record.failure_kind, record.is_reference, record.candidate) == (
            SURPLUS,
            False,
            None,
        )
        assert trial.user_attrs[QUEUED_AS] == f"candidate:{name}"
    counts = trial_counts(study)
    assert (counts.not_run, counts.failed, counts.unfinished) == (2, 1, 3)
    assert [f.kind for f in counts.failures] == ["interrupted"]

    study = prepare(plan)  # a third run queues nothing more
    assert queue(study) == FIRST_QUEUE and len(study.trials) == 6


def test_candidates_interrupted_with_the_reference_are_measured_again(plan: StudyPlan) -> None:
    """A killed --gpus coordinator: the reference and both candidates were running."""
    study = prepare(plan)
    for number, kind in ((0, "interrupted"), (1, "orphaned"), (2, "no-reference")):
        start(study, number)
        end(study, number, kind)
    study = prepare(plan)
    assert queue(study) == FIRST_QUEUE


def test_a_candidate_that_failed_by_itself_is_not_queued_again(plan: StudyPlan) -> None:
    study = prepare(plan)
    for number in range(3):
        start(study, number)
    reference_id = study.trials[0]._trial_id
    config = plan.space.reference_config().model_dump()
    study._storage.set_trial_user_attr(reference_id, "config", config)
    study._storage.set_trial_state_values(reference_id, TrialState.COMPLETE, [1, 1])
    end(study, 1, "oom")
    end(study, 2, "interrupted")
    study = prepare(plan)
    assert queue(study) == [(False, "side-128")]


def test_a_second_run_beside_a_running_reference_queues_no_second_one(plan: StudyPlan) -> None:
    study = prepare(plan)
    start(study, 0)  # the first run measures the reference now
    study = prepare(plan)
    assert queue(study) == FIRST_QUEUE[1:]
    assert sum(TrialRecord.of(t).is_reference for t in study.trials) == 1


def test_copies_queued_by_two_runs_at_once_are_not_run(plan: StudyPlan) -> None:
    """Two runs that read the study before either queued: each queued all three."""
    study = prepare(plan)
    for attrs in ({"is_reference": True}, {"candidate": "batch-2"}, {"candidate": "side-128"}):
        study.enqueue_trial({}, user_attrs=attrs)
    study = prepare(plan)
    assert queue(study) == FIRST_QUEUE
    copies = study.trials[3:]
    assert all(TrialRecord.of(t).failure_kind == SURPLUS for t in copies)
    assert "queued twice" in str(copies[0].user_attrs["failure_reason"])
    assert sum(TrialRecord.of(t).is_reference for t in study.trials) == 1


def test_a_trial_another_run_has_started_is_never_ended_here(plan: StudyPlan) -> None:
    study = prepare(plan)
    start(study, 0)
    end(study, 0, "interrupted")
    start(study, 1)  # another run took the candidate between this run's read and its write
    study = prepare(plan)
    assert study.trials[1].state == TrialState.RUNNING
    assert queue(study)[0] == (True, None)


def _swift_plan(tmp_path: Path, **overrides: object) -> StudyPlan:
    """A space deployed with and measured through `swift deploy`: it has a baseline."""
    reference = load_space("smoke").reference_config().model_dump(exclude_none=True)
    space = small_space(
        tmp_path, name="b", candidates=CANDIDATES, params=PARAMS, reference=reference, **overrides
    )
    return plan_study(load_space(str(space)), storage_url=f"sqlite:///{tmp_path}/b.db")


def _waiting(study: optuna.Study) -> list[tuple[bool, str | None, str | None]]:
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    return [(r.is_reference, r.candidate, r.baseline) for r in (TrialRecord.of(t) for t in waiting)]


BASELINE = (False, None, "swift deploy's defaults")


def test_the_deploy_target_s_defaults_come_behind_the_first_candidate(tmp_path: Path) -> None:
    study = prepare(_swift_plan(tmp_path, sampler={"steps": False}))
    assert _waiting(study) == [(True, None, None), (False, "batch-2", None), BASELINE,
                               (False, "side-128", None)]  # fmt: skip
    baseline = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))[2]
    # Its configuration is the space's to build; the sampler is asked for nothing.
    assert baseline.system_attrs["fixed_params"] == {}
    # A second run on the same study queues it no second time.
    study = prepare(_swift_plan(tmp_path, sampler={"steps": False}))
    assert sum(1 for t in study.get_trials(deepcopy=False) if TrialRecord.of(t).baseline) == 1


def test_with_steps_the_defaults_wait_for_the_study_to_leave_the_launch_or_end_the_run(
    tmp_path: Path,
) -> None:
    plan = _swift_plan(tmp_path)
    study = prepare(plan)
    # The steps start from the first candidate's figure: nothing else is queued yet.
    assert _waiting(study) == [(True, None, None), (False, "batch-2", None)]
    # No candidate has a figure yet: no step to leave a launch from, and trials are left.
    queue_baseline_when_due(study, plan, None, last=False)
    assert len(_waiting(study)) == 2
    queue_baseline_when_due(study, plan, None, last=True)
    assert _waiting(study)[-1] == BASELINE  # the run's last trial
    queue_baseline_when_due(study, plan, None, last=True)
    assert _waiting(study).count(BASELINE) == 1
    # The later candidates come behind it; it is not queued with them a second time.
    queue_reference_and_candidates(study, plan, room=10)
    assert _waiting(study)[-2:] == [BASELINE, (False, "side-128", None)]
