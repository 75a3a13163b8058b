"""What the study proposes next: the incumbent's one-lever steps, the launch it keeps, or the
sampler's free choice.

After each trial the study's sampler is pointed at the next proposal, through Optuna's
PartialFixedSampler around the study's own (autotune.study.proposals.sampler):

- while the incumbent has an untried one-lever neighbour (autotune.study.proposals.steps),
  that step's levers: request-time steps on the incumbent's launch, then up to
  `launches.launch_steps` launches with one launch parameter changed;
- else, while the running launch has trials left (`launches.trials_per_launch`), its
  launch-time parameters, the sampler proposing request-time settings;
- else nothing: the sampler chooses freely, a new launch included.

Every trial is an ordinary Optuna trial, so the search stays Optuna's. A launch whose first
two trials both lost their races is left early (RACED_TO_LEAVE). Which launch is up is the
launch scheduler's (autotune.study.run.launches); it says when a new one starts (`new_launch`).
"""

from __future__ import annotations

import warnings

import optuna
from optuna.trial import FrozenTrial

from autotune.params import LAUNCH_PARAMS, base_param
from autotune.records.stored import TrialRecord
from autotune.space.sampling import searched
from autotune.study.plan import StudyPlan
from autotune.study.proposals.steps import Step, chosen_launches, next_step

# Trials on a launch, every one stopped by racing, after which the launch is given up.
RACED_TO_LEAVE = 2


class Steering:
    """Points the study's sampler at its next proposal, trial after trial."""

    def __init__(self, plan: StudyPlan, base_sampler: optuna.samplers.BaseSampler) -> None:
        self.plan = plan
        self.base_sampler = base_sampler
        self.settings = plan.space.launches
        self.repeats_in_a_row = 0
        self.fixed: dict[str, object] | None = None
        # The running launch's parameters as Optuna names them (None before its first trial),
        # and its trials that were not stopped by racing.
        self.session_params: dict[str, object] | None = None
        self.contenders_on_launch = 0
        # The step the next proposal is pinned to, and the backend a launch step pinned (the
        # budget's start-up guess).
        self.step: Step | None = None
        self.pinned_backend: str | None = None

    def new_launch(self) -> None:
        """A trial started a new launch: what was kept of the one before (its parameters, its
        contenders) must not outlive it, or the sampler would be pinned back to it."""
        self.fixed = None
        self.session_params = None
        self.contenders_on_launch = 0

    def keeps_launch(self) -> bool:
        """Whether the next trial runs on the launch that is up (the budget then counts no
        start-up for it): a request-time step on it, or the launch kept for the sampler."""
        if self.step is None:
            return self.fixed is not None
        running = self.session_params
        return running is not None and all(
            running.get(key) == value
            for key, value in self.step.pinned.items()
            if base_param(key) in LAUNCH_PARAMS
        )

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        *,
        on_this_launch: bool,
        trials_on_launch: int,
    ) -> None:
        """Fix the next proposal's launch parameters to this trial's, or free them.
        `on_this_launch`: the trial ran on the launch still up, its `trials_on_launch`-th
        (autotune.study.run.launches.LaunchScheduler)."""
        record = TrialRecord.of(trial)
        duplicate = record.duplicate_of is not None
        self.repeats_in_a_row = self.repeats_in_a_row + 1 if duplicate else 0
        if on_this_launch:
            self.session_params = _launch_params(trial)
        if on_this_launch and record.raced_by is None:
            self.contenders_on_launch += 1
        # A launch whose trials all lost their races by now is a launch to leave: its
        # request-side settings were tried and none can win (eager mode, four times slower).
        hopeless = self.contenders_on_launch == 0 and trials_on_launch >= RACED_TO_LEAVE
        keep = (
            on_this_launch
            and not hopeless
            and trials_on_launch < self.settings.trials_per_launch
            and self.repeats_in_a_row < self.settings.max_repeated_proposals
            and (self.fixed is not None or self._fixable(trial))
        )
        if keep and self.fixed is None:
            self.fixed = _launch_params(trial)
        elif not keep:
            self.fixed = None
        self.steer(study)

    def steer(self, study: optuna.Study) -> None:
        """Point the study's sampler at the next proposal: the incumbent's next one-lever step
        while one is left (autotune.study.proposals.steps), else the launch that is kept, else the
        sampler unrestricted. Run after every trial, and once when a process joins (a
        resumed study, another worker)."""
        space = self.plan.space
        self.step = None
        if space.sampler.steps:
            left = chosen_launches(study) < self.settings.launch_steps
            self.step = next_step(space, study, launch_steps_left=left)
        pinned = self.fixed if self.step is None else self.step.pinned
        backend = (pinned or {}).get("backend") if self.step and self.step.new_launch else None
        self.pinned_backend = backend if isinstance(backend, str) else None
        if pinned is None:
            study.sampler = self.base_sampler
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.sampler = optuna.samplers.PartialFixedSampler(pinned, self.base_sampler)

    def step_of(self, trial: optuna.Trial) -> Step | None:
        """The step `trial` was proposed as, when the sampler was pinned to one."""
        step = self.step
        if step is None or any(trial.params.get(k) != v for k, v in step.pinned.items()):
            return None
        return step

    def _fixable(self, trial: FrozenTrial) -> bool:
        """Whether fixing this trial's parameters pins its whole launch: not so for a reference
        whose launch values lie outside the search (they are not trial parameters)."""
        config = TrialRecord.of(trial).config
        space = self.plan.space
        return bool(config) and all(
            found[0] in trial.params
            for name in LAUNCH_PARAMS
            if (found := searched(space, name, config)) is not None
        )


def _launch_params(trial: FrozenTrial) -> dict[str, object]:
    """The trial's launch-time parameters, by their Optuna names."""
    return {key: value for key, value in trial.params.items() if base_param(key) in LAUNCH_PARAMS}
