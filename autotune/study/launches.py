"""One engine launch, many trials: which launch is up, and what the sampler may propose next.

Starting an engine (a server, a model load, a compile) costs far more than one measurement,
so a launch is kept for several trials. After each trial the scheduler tells Optuna what
comes next, through Optuna's PartialFixedSampler around the study's sampler:

- while the incumbent has an untried one-lever neighbour (autotune.study.steps), that step's
  levers: request-time steps on the incumbent's launch, then up to `launches.launch_steps`
  launches with one launch parameter changed;
- else, while the running launch has trials left (`launches.trials_per_launch`), its
  launch-time parameters, the sampler proposing request-time settings;
- else nothing: the sampler chooses freely, a new launch included.

Every trial is an ordinary Optuna trial, so the search stays Optuna's. A launch whose first
two trials both lost their races is left early (RACED_TO_LEAVE).

A trial whose launch parameters differ from the running launch's stops it first (a GPU holds
one engine at a time) and starts its own. A failed trial ends its launch. Each launch holds
its GPUs (as many as its tensor_parallel) from the host's pool (autotune.study.gpu_pool)
until it stops, so the engines of parallel workers never share a device.
"""

from __future__ import annotations

import warnings

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.engines import EngineSession, PhaseCallback
from autotune.engines.gpus import Gpu
from autotune.params import LAUNCH_PARAMS, TrialConfig, base_param
from autotune.records.stored import TrialRecord
from autotune.space.sampling import searched
from autotune.study.gpu_pool import GpuLease, GpuPool
from autotune.study.plan import StudyPlan
from autotune.study.runtime import REAL, SessionOpener
from autotune.study.steps import Step, chosen_launches, next_step

# Trials on a launch, every one stopped by racing, after which the launch is given up.
RACED_TO_LEAVE = 2


class LaunchScheduler:
    """Holds the running launch of this process and steers the sampler between launches."""

    def __init__(
        self,
        plan: StudyPlan,
        base_sampler: optuna.samplers.BaseSampler,
        *,
        open_session: SessionOpener = REAL.open_session,
    ) -> None:
        self.plan = plan
        self.open_session = open_session
        self.base_sampler = base_sampler
        self.settings = plan.space.launches
        self.session: EngineSession | None = None
        self.trials_on_session = 0
        self.contenders_on_session = 0  # its trials that were not stopped by racing
        self.repeats_in_a_row = 0
        self.fixed: dict[str, object] | None = None
        # The running launch's parameters as Optuna names them (None before its first trial).
        self.session_params: dict[str, object] | None = None
        # The step the next proposal is pinned to, and the backend a launch step pinned (the
        # budget's start-up guess).
        self.step: Step | None = None
        self.pinned_backend: str | None = None
        self.pool = GpuPool(plan.gpus) if plan.gpus else None
        self.lease: GpuLease | None = None

    @property
    def gpus(self) -> list[Gpu]:
        """The GPUs of the running launch ([] without a pool)."""
        return self.lease.gpus if self.lease is not None else []

    @property
    def gpu_wait_s(self) -> float:
        """How long the running launch waited for its GPUs (0 without a pool)."""
        return self.lease.waited_s if self.lease is not None else 0.0

    @property
    def gpu_share(self) -> float:
        """The running launch's share of the run's GPUs: what its time costs the budget."""
        if self.pool is None or self.lease is None:
            return 1.0
        return len(self.lease.gpus) / len(self.pool.gpus)

    def session_for(
        self, config: TrialConfig, on_phase: PhaseCallback | None
    ) -> tuple[EngineSession, bool]:
        """The running launch when it serves `config`, else a new one; (session, started)."""
        current = self.session
        if current is not None and current.launch_key == config.launch_key() and current.alive():
            self.trials_on_session += 1
            return current, False
        self.close()
        # A new launch: what was kept of the one before (its parameters, its trial count)
        # must not outlive it, or the sampler would be pinned back to it after the steps.
        self.fixed = None
        self.session_params = None
        plan = self.plan
        if self.pool is not None:
            self.lease = self.pool.acquire(config.tensor_parallel, on_wait=on_phase)
            if on_phase is not None:
                on_phase("on GPU " + ",".join(str(gpu.index) for gpu in self.lease.gpus))
        try:
            self.session = self.open_session(
                plan.space,
                config,
                model_path=plan.model_path,
                evalset=plan.evalset,
                endpoint=plan.endpoint,
                image_geometry=plan.image_geometry,
                on_phase=on_phase,
                gpus=self.gpus or None,
                adapters=plan.adapters,
                quantized_paths=plan.quantized_paths,
            )
        except BaseException:
            self.close()
            raise
        self.trials_on_session = 1
        self.contenders_on_session = 0
        return self.session, True

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

    def after_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Fix the next proposal's launch parameters to this trial's, or free them."""
        record = TrialRecord.of(trial)
        duplicate = record.duplicate_of is not None
        self.repeats_in_a_row = self.repeats_in_a_row + 1 if duplicate else 0
        session = self.session
        on_this_launch = (
            session is not None
            and session.alive()
            and record.launch_id in (session.launch_id, None)
            and trial.state in (TrialState.COMPLETE, TrialState.PRUNED)
        )
        if on_this_launch:
            self.session_params = _launch_params(trial)
        if on_this_launch and record.raced_by is None:
            self.contenders_on_session += 1
        # A launch whose trials all lost their races by now is a launch to leave: its
        # request-side settings were tried and none can win (eager mode, four times slower).
        hopeless = self.contenders_on_session == 0 and self.trials_on_session >= RACED_TO_LEAVE
        keep = (
            on_this_launch
            and not hopeless
            and self.trials_on_session < self.settings.trials_per_launch
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
        while one is left (autotune.study.steps), else the launch that is kept, else the
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

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        self.session = None
        self.trials_on_session = 0
        if self.lease is not None:  # after the engine is down: its memory is free again
            self.lease.release()
        self.lease = None


def _launch_params(trial: FrozenTrial) -> dict[str, object]:
    """The trial's launch-time parameters, by their Optuna names."""
    return {key: value for key, value in trial.params.items() if base_param(key) in LAUNCH_PARAMS}
