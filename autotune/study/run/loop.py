"""The Optuna study: the reference trial first, then the sampler's trials, each contained.

`run_study` is what `autotune run` calls. It opens the study (autotune.study.start.opening),
then runs Optuna's own optimize loop; callbacks after each trial print progress, keep or free
the running launch (autotune.study.run.launches), stop at the trial target (a repeated proposal
does not count) and stop before a trial that would not fit in the budget
(autotune.study.run.budget).
"""

from __future__ import annotations

import warnings

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StudyError, TrialFailure
from autotune.records.stored import TrialRecord
from autotune.study.plan import StudyPlan
from autotune.study.proposals.queueing import (
    candidates_now,
    later_candidates_due,
    queue_baseline_when_due,
    queue_reference_and_candidates,
)
from autotune.study.proposals.steering import Steering
from autotune.study.results.counting import counted_trials
from autotune.study.results.progress import SURPLUS, Progress
from autotune.study.run.budget import Budget, budget_allows, start_fits
from autotune.study.run.interrupts import InterruptGate
from autotune.study.run.launches import LaunchScheduler
from autotune.study.run.objective import Objective
from autotune.study.run.runtime import REAL, Runtime
from autotune.study.start.opening import open_study, prepare_study, warn_if_set_too_small
from autotune.study.store.recovery import Spool
from autotune.study.store.storage import StorageUnavailable

# Proposals of measured configurations in a row after which the space counts as exhausted.
EXHAUSTED_AFTER = 10
# Failed trials in a row after which the study stops: failures do not count towards --trials,
# so a configuration space that cannot run here must not keep a study going forever.
FAILURES_IN_A_ROW = 5


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
        self.held_back = candidates_now(plan) is not None  # the later candidates wait

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
        queue_baseline_when_due(study, self.plan, self.steering.step, last=self._last(study))
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

    def _last(self, study: optuna.Study) -> bool:
        """Whether the next trial is the run's last: one counted trial left, or a budget that
        holds one more trial on a new launch of the deploy target but not two."""
        if self.target - counted_trials(study, include_running=True) == 1:
            return True
        left = self.budget.remaining(study)
        if left is None:
            return False
        one = self.budget.estimate(study, launch_backends={self.plan.space.deploy})
        return one <= left < 2 * one

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
        plan,
        progress,
        launches,
        steering,
        budget,
        spool,
        target=target,
        gate=gate,
        runtime=runtime,
    )
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
    prepared = prepare_study(plan, target, progress, fits=start_fits(plan, progress))
    if prepared is None:
        study, _ = open_study(plan)
        return study
    study = optimize(plan, target=target, timeout_s=timeout_s, progress=progress, runtime=runtime)
    progress.finish(study)
    return study
