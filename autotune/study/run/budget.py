"""A wall-clock budget for a study's trials: start nothing that cannot finish inside it.

The budget counts trial time (start-ups, warm-up, measuring, accuracy), summed over every run of
the study, so a resumed study goes on with what is left. With several workers (--gpus) a
trial counts its share of the GPUs, so the budget is spent at wall-clock pace: two workers on
two GPUs run twice the trials of one in the same budget. Before each trial the study estimates
what it will cost from the trials it has already run: the median start-up of its launches
(only when the next trial needs a new one) plus the median of the rest of a trial. A trial that
does not fit is not started; a trial that is started is measured whole (its load test is
shortened to the time left, never below its minimum).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial

from autotune.backends import BACKENDS
from autotune.records.stored import TrialRecord
from autotune.study.plan import StudyPlan
from autotune.study.results.progress import Progress
from autotune.study.results.timeshare import budget_seconds, trial_seconds

# Start-up guesses before a study has launched anything of its own, in seconds.
STARTUP_GUESS_S = {name: backend.startup_guess_s for name, backend in BACKENDS.items()}
# A guess of one trial's measured part before any trial has run.
FIRST_TRIAL_GUESS_S = 30.0
# A load test is never cut below this many seconds by the budget: it still measures its
# minimum number of requests, this only stops it asking for more.
MIN_MEASURE_S = 5.0


def _finished(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]


class Budget:
    """The study's remaining trial time, and whether a next trial fits in it."""

    def __init__(self, total_s: float | None) -> None:
        self.total_s = total_s

    def spent(self, study: optuna.Study) -> float:
        return sum(budget_seconds(t) for t in _finished(study))

    def remaining(self, study: optuna.Study) -> float | None:
        if self.total_s is None:
            return None
        return self.total_s - self.spent(study)

    def measure_seconds(
        self, study: optuna.Study, *, used_s: float, accuracy: bool
    ) -> float | None:
        """How long a trial's load test may run so the trial ends inside the budget, after
        `used_s` of its own so far (its start-up); None without a budget."""
        left = self.remaining(study)
        if left is None:
            return None
        return max(MIN_MEASURE_S, left - used_s - self.overhead(study, accuracy=accuracy))

    def estimate(self, study: optuna.Study, *, launch_backends: set[str] | None) -> float:
        """Seconds the next trial should take. `launch_backends`: None when it reuses the
        running launch, else the backends its new launch may have (the slowest counts)."""
        timed = [(t, r) for t in _finished(study) if (r := TrialRecord.of(t)).time_s is not None]
        # Not the reference's: another engine, one request in flight, run to its cap (on the
        # H200 200 s, where the LMDeploy trials after it took 20-140 s): a 7-minute study
        # judged the next trial by it and measured nothing else (bench/results/
        # h200-racing-2026-12-03.md).
        work = [
            trial_seconds(t) - r.times.startup - r.times.gpu_wait
            for t, r in timed
            if r.duplicate_of is None and not r.is_reference
        ]
        estimate = statistics.median(work) if work else FIRST_TRIAL_GUESS_S
        if launch_backends:
            records = [r for _, r in timed]
            estimate += max(self._startup(records, backend) for backend in launch_backends)
        return estimate

    def overhead(self, study: optuna.Study, *, accuracy: bool = True) -> float:
        """The median warm-up + accuracy of a trial: what follows its load test. Each from
        the trials that ran it: trials stopped by racing or screening run no accuracy pass,
        and once most trials are raced a median over all would reserve nothing for the next
        contender's. `accuracy`: False when the next trial reuses earlier answers. Never the
        reference's, as in `estimate`: its in-process pass took several times a served one's,
        and reserving it cut the first candidate's load to its minimum."""
        records = [TrialRecord.of(t) for t in _finished(study)]
        measured = [
            r.time_s
            for r in records
            if r.time_s is not None and r.duplicate_of is None and not r.is_reference
        ]
        total = 0.0
        parts = [[times.warmup for times in measured]]
        if accuracy:
            parts.append([times.accuracy for times in measured])
        for seconds in parts:
            ran = [s for s in seconds if s > 0]
            total += statistics.median(ran) if ran else 0.0
        return total

    @staticmethod
    def _startup(records: list[TrialRecord], backend: str) -> float:
        started = [r.times.startup for r in records if r.backend == backend]
        same = [seconds for seconds in started if seconds]
        return statistics.median(same) if same else STARTUP_GUESS_S.get(backend, 60.0)

    def fits(self, study: optuna.Study, *, launch_backends: set[str] | None) -> bool:
        left = self.remaining(study)
        if left is None:
            return True
        return left >= self.estimate(study, launch_backends=launch_backends)


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


def start_fits(plan: StudyPlan, progress: Progress) -> Callable[[optuna.Study], bool]:
    """The budget's check before a run queues its first trials (prepare_study's `fits`): a
    new launch of any backend, since none is kept yet. The opening sits below the run-time
    and takes the rule from it rather than reaching up for it."""
    budget = Budget(plan.budget_s)
    return lambda study: budget_allows(study, plan, budget, progress, keeps_launch=False)


def _launch_backends(plan: StudyPlan) -> set[str]:
    """The backends a freely proposed trial may launch (for the budget's start-up estimate)."""
    spec = plan.space.params.get("backend")
    if spec is not None and spec.choices:
        return {str(choice) for choice in spec.choices}
    return {plan.space.reference_config().backend}
