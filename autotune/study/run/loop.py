"""The Optuna study: the reference trial first, then the sampler's trials, each contained.

`run_study` is what `autotune run` calls. It runs Optuna's own optimize loop; callbacks after
each trial print progress, keep or free the running launch (autotune.study.run.launches), stop at
the trial target (a repeated proposal does not count) and stop before a trial that would not
fit in the budget (autotune.study.run.budget).
"""

from __future__ import annotations

import warnings
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.accuracy.floor import floor_warning
from autotune.engines.leftovers import clean_up
from autotune.errors import StudyError, TrialFailure
from autotune.records.readable import unreadable_line, unreadable_trials
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.records.writer import write_study
from autotune.study.plan import StudyPlan, study_attrs
from autotune.study.proposals.candidate_order import candidates_now, later_candidates_due
from autotune.study.proposals.queueing import queue_reference_and_candidates
from autotune.study.proposals.sampler import make_sampler
from autotune.study.proposals.steering import Steering
from autotune.study.results.counting import counted_trials, trial_counts
from autotune.study.results.progress import SURPLUS, Progress
from autotune.study.results.select import reference_trial
from autotune.study.results.timeshare import study_time_share
from autotune.study.run.budget import Budget
from autotune.study.run.interrupts import InterruptGate
from autotune.study.run.launches import LaunchScheduler
from autotune.study.run.objective import Objective
from autotune.study.run.resume import (
    COMPARISON_BASIS,
    await_setup,
    check_resumable,
    comparison_basis,
)
from autotune.study.run.runtime import REAL, Runtime
from autotune.study.store.recovery import Spool, fail_orphaned, fail_stale, recover
from autotune.study.store.storage import (
    StorageUnavailable,
    local_file,
    open_storage,
    remove_study_file,
)

# Proposals of measured configurations in a row after which the space counts as exhausted.
EXHAUSTED_AFTER = 10
# Failed trials in a row after which the study stops: failures do not count towards --trials,
# so a configuration space that cannot run here must not keep a study going forever.
FAILURES_IN_A_ROW = 5


def open_study(plan: StudyPlan) -> tuple[optuna.Study, optuna.samplers.BaseSampler]:
    """Create or resume the study. A study file this run creates is removed again when the
    study cannot be set up in it (a full disk), so a rerun starts clean and finds one study."""
    stored = local_file(plan.storage_url)
    new_file = stored is not None and not stored.exists()
    try:
        return _open_study(plan)
    except BaseException:
        if new_file and stored is not None:
            remove_study_file(stored)
        raise


def _open_study(plan: StudyPlan) -> tuple[optuna.Study, optuna.samplers.BaseSampler]:
    space = plan.space
    storage = open_storage(plan.storage_url, create=True)
    # Failed trials are reported by our progress lines; Optuna's own warning would add a
    # traceback for every contained failure.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    basis = comparison_basis(plan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = make_sampler(space)
        # Looked up first: creating a study that exists writes a refused record to a journal,
        # and a resume that is refused must write nothing.
        if _exists(storage, plan.study_name):
            study = optuna.load_study(study_name=plan.study_name, storage=storage, sampler=sampler)
            await_setup(study)
        else:
            study = _create(plan, storage, sampler, basis)
    check_resumable(study, plan, basis)
    if COMPARISON_BASIS not in study.user_attrs:  # stored before the basis was
        write_study(study, {COMPARISON_BASIS: basis})
    if "objective_metrics" not in StudyRecord.of(study).model_fields_set:  # a new study
        write_study(study, study_attrs(plan))
        # Named objectives: optuna-dashboard labels its axes with them instead of "Objective 0".
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([o.metric for o in space.objectives])
    return study, sampler


def _exists(storage: optuna.storages.BaseStorage, name: str) -> bool:
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


def _create(
    plan: StudyPlan,
    storage: optuna.storages.BaseStorage,
    sampler: optuna.samplers.BaseSampler,
    basis: dict[str, Any],
) -> optuna.Study:
    """The new study, its comparison basis stored first, so a run that opens it a moment later
    compares with it; or, when another run created it first, that run's study."""
    try:
        study = optuna.create_study(
            study_name=plan.study_name,
            storage=storage,
            directions=plan.space.directions(),
            sampler=sampler,
        )
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=plan.study_name, storage=storage, sampler=sampler)
        await_setup(study)
        return study
    write_study(study, {COMPARISON_BASIS: basis})
    return study


def warn_if_set_too_small(study: optuna.Study, plan: StudyPlan, progress: Progress) -> None:
    """Once the reference's accuracy is known: say so when the set is too small for the floor."""
    reference = reference_trial(study)
    accuracy = TrialRecord.of(reference).accuracy if reference is not None else None
    if accuracy is None:
        return
    warning = floor_warning(len(plan.evalset.items), accuracy, plan.space.constraints)
    if warning is not None:
        progress.note(f"warning: {warning}")
        if StudyRecord.of(study).floor_warning != warning:
            write_study(study, {"floor_warning": warning})


def _launch_backends(plan: StudyPlan) -> set[str]:
    """The backends a freely proposed trial may launch (for the budget's start-up estimate)."""
    spec = plan.space.params.get("backend")
    if spec is not None and spec.choices:
        return {str(choice) for choice in spec.choices}
    return {plan.space.reference_config().backend}


class _AfterTrial:
    """Optuna callback: progress, launches, the trial target, the budget, an exhausted space."""

    def __init__(
        self,
        plan: StudyPlan,
        target: int,
        progress: Progress,
        launches: LaunchScheduler,
        steering: Steering,
        budget: Budget,
        spool: Spool,
    ) -> None:
        self.plan = plan
        self.target = target
        self.progress = progress
        self.launches = launches
        self.steering = steering
        self.budget = budget
        self.spool = spool
        self.repeats = 0
        self.failures = 0
        self.held_back = (
            candidates_now(plan) is not None
        )  # autotune.study.proposals.candidate_order

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        # The storage holds the finished trial now: its spooled copy is no longer needed.
        self.spool.remove(trial.number)
        counted = counted_trials(study)
        self.progress.trial_finished(study, trial, counted=counted)
        self.steering.after_trial(
            study,
            trial,
            on_this_launch=self.launches.on_this_launch(trial),
            trials_on_launch=self.launches.trials_on_session,
        )
        if self.held_back and later_candidates_due(study, self.steering.step):
            self.held_back = False
            room = self.target - counted_trials(study, include_running=True)
            for note in queue_reference_and_candidates(study, self.plan, room=room):
                self.progress.note(note)
        record = TrialRecord.of(trial)
        self.repeats = self.repeats + 1 if record.duplicate_of is not None else 0
        kind = record.failure_kind
        self.failures = self.failures + 1 if kind not in (None, SURPLUS) else 0
        if record.is_reference and trial.state == TrialState.COMPLETE:
            warn_if_set_too_small(study, self.plan, self.progress)
        if record.is_reference and trial.state != TrialState.COMPLETE:
            accuracy = self.plan.space.constraints.accuracy
            if accuracy.mode == "relative" and accuracy.enabled:
                raise StudyError(
                    f"the reference trial failed ({record.failure_reason or '?'})"
                    "; the relative accuracy floor needs it — fix the cause and run again"
                )
        if counted_trials(study, include_running=True) >= self.target:
            study.stop()
        elif self.failures >= FAILURES_IN_A_ROW:
            self.progress.note(
                f"{self.failures} trials failed in a row (reasons above); stopping: fix the "
                "cause and run the same command again"
            )
            study.stop()
        elif self.repeats >= EXHAUSTED_AFTER:
            self.progress.note(
                f"the sampler proposed measured configurations {self.repeats} times in a row: "
                "the space looks exhausted; stopping"
            )
            study.stop()
        elif not self.fits(study):
            study.stop()

    def fits(self, study: optuna.Study) -> bool:
        steering = self.steering
        return budget_allows(
            study,
            self.plan,
            self.budget,
            self.progress,
            keeps_launch=steering.keeps_launch(),
            pinned_backend=steering.pinned_backend,
        )


def budget_allows(
    study: optuna.Study,
    plan: StudyPlan,
    budget: Budget,
    progress: Progress,
    *,
    keeps_launch: bool,
    pinned_backend: str | None = None,
) -> bool:
    """Whether the next trial fits in the budget; says so when it does not. A new launch
    costs the start-up of `pinned_backend` when a launch step chose it, else of the slowest
    backend the sampler may choose."""
    backends = (
        None if keeps_launch else {pinned_backend} if pinned_backend else _launch_backends(plan)
    )
    if budget.fits(study, launch_backends=backends):
        return True
    left = budget.remaining(study) or 0.0
    need = budget.estimate(study, launch_backends=backends)
    progress.note(
        f"budget: {max(left, 0.0):.0f} s left of {budget.total_s:.0f} s, the next trial "
        f"needs about {need:.0f} s; stopping here (raise --budget to go on)"
    )
    return False


def _storage_failure(exc: BaseException) -> StorageUnavailable | None:
    """The storage failure behind `exc`, if any: Optuna's bookkeeping after a failed write
    raises errors of its own (an AssertionError, an UnboundLocalError) that hide it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, StorageUnavailable):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def prepare_study(plan: StudyPlan, target: int, progress: Progress) -> optuna.Study | None:
    """Open (or resume) the study, repair what an earlier run left behind, and queue the
    reference and the candidates. None when there is nothing to run (target or budget met)."""
    study, _ = open_study(plan)
    spool = Spool(plan.storage_url, plan.study_name)
    # What an earlier run left behind: its processes, its RUNNING trials, its unrecorded
    # results.
    repairs = [*clean_up(), *fail_orphaned(study), *fail_stale(study), *recover(study, spool)]
    repairs += [
        f"{unreadable_line(plan.study_name, t)}; it is left out (the sampler skips it)"
        for t in unreadable_trials(study)
    ]
    done = counted_trials(study)
    progress.start(done=done, study_name=plan.study_name)
    for note in [*plan.notes, *repairs]:
        progress.note(note)
    if done >= target:
        progress.note(f"study '{plan.study_name}' already has {done} counted trials")
        return None
    warn_if_set_too_small(study, plan, progress)
    budget = Budget(plan.budget_s)
    if reference_trial(study) is not None and not budget_allows(
        study, plan, budget, progress, keeps_launch=False
    ):
        return None
    first = candidates_now(plan)
    for note in queue_reference_and_candidates(study, plan, room=target - done, candidates=first):
        progress.note(note)
    return study


def optimize(
    plan: StudyPlan,
    *,
    target: int,
    timeout_s: float | None,
    progress: Progress,
    runtime: Runtime = REAL,
) -> optuna.Study:
    """Run trials in this process until the study holds `target` counted trials, the budget
    ends or another worker's stop condition holds; prepare_study has run. `runtime`: the
    clock and launch opener (autotune.study.run.runtime; the replay benchmark passes its own)."""
    study, base_sampler = open_study(plan)
    spool = Spool(plan.storage_url, plan.study_name)
    steering = Steering(plan, base_sampler)
    launches = LaunchScheduler(plan, runtime=runtime, on_new_launch=steering.new_launch)
    steering.steer(study)  # a resumed study or another worker: a launch step may be due
    budget = Budget(plan.budget_s)
    after = _AfterTrial(plan, target, progress, launches, steering, budget, spool)
    gate = InterruptGate()
    objective = Objective(
        plan, progress, launches, steering, budget, spool, target=target, gate=gate,
        runtime=runtime,
    )  # fmt: skip
    try:
        with warnings.catch_warnings(), gate.during_optimize():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.optimize(
                objective,
                timeout=timeout_s,
                catch=(TrialFailure,),
                callbacks=[after],
                gc_after_trial=False,
            )
    except Exception as exc:
        refused = _storage_failure(exc)
        if refused is None:
            raise
        if objective.current is not None:
            # Optuna ended the trial FAIL, if the storage let it, without a reason.
            spool.note_failure(objective.current, "storage", f"{refused}; the run stopped")
        kept = spool.pending()
        where = (
            "; measured results not recorded yet are kept in "
            + ", ".join(str(path) for path in kept)
            if kept
            else ""
        )
        raise StorageUnavailable(
            f"{refused}{where}; fix the storage (free disk space, release the lock) and run "
            "the same command again to record them and go on"
        ) from None
    finally:
        launches.close()
    return study


def run_study(
    plan: StudyPlan,
    *,
    trials: int | None = None,
    timeout_s: float | None = None,
    progress: Progress | None = None,
    runtime: Runtime = REAL,
) -> optuna.Study:
    """Run (or resume) the study until it holds `trials` counted trials or the budget ends."""
    target = trials if trials is not None else plan.space.trials
    progress = progress or Progress(total=target)
    prepared = prepare_study(plan, target, progress)
    if prepared is None:
        study, _ = open_study(plan)
        return study
    study = optimize(plan, target=target, timeout_s=timeout_s, progress=progress, runtime=runtime)
    finish_study(study, progress)
    return study


def finish_study(study: optuna.Study, progress: Progress) -> None:
    progress.note(trial_counts(study).line())
    progress.note(f"time: {study_time_share(study).line()}")
    progress.finish(study)
