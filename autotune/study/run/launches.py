"""One engine launch, many trials: which launch is up, on which GPUs.

Starting an engine (a server, a model load, a compile) costs far more than one measurement,
so a launch is kept for several trials: what the next trial is proposed on is the proposal
policy's (autotune.study.proposals.steering); this holds the launch that is up and starts the next.

A trial whose launch parameters differ from the running launch's stops it first (a GPU holds
one engine at a time) and starts its own. A failed trial ends its launch. The one exception is
the reference that only feeds the "x the reference" figure (autotune.study.run.reference_load):
while it starts and measures, the next launch's server may start beside it, when
its engine sizes its KV cache from the memory left free (LMDeploy), so the first deployable
launch's start-up is not paid on top of the reference's time, its accuracy pass included (the
next trial's record says how much of that pass the start-up hid). Each launch holds
its GPUs (as many as its tensor_parallel) from the host's pool (autotune.engines.gpu_pool)
until it stops, so the engines of parallel workers never share a device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from optuna.trial import FrozenTrial, TrialState

from autotune.backends import BACKENDS
from autotune.engines import EngineSession, PendingSession, PhaseCallback
from autotune.engines.gpu_pool import GpuLease, GpuPool
from autotune.engines.gpus import Gpu
from autotune.errors import TrialFailure
from autotune.params import TrialConfig
from autotune.records.stored import TrialRecord
from autotune.study.plan import StudyPlan
from autotune.study.run.runtime import REAL, Runtime

T = TypeVar("T")


class LaunchScheduler:
    """Holds the running launch of this process, and the one starting beside it."""

    def __init__(
        self,
        plan: StudyPlan,
        *,
        runtime: Runtime = REAL,
        on_new_launch: Callable[[], None] = lambda: None,
    ) -> None:
        """`on_new_launch`: told when a trial starts a new launch (autotune.study.proposals.steering
        forgets the launch it kept)."""
        self.plan = plan
        self.on_new_launch = on_new_launch
        self.session: EngineSession | None = None
        self.trials_on_session = 0
        self.pool = GpuPool(plan.gpus) if plan.gpus else None
        self.lease: GpuLease | None = None
        self.starter = LaunchStarter(plan, runtime)
        self.beside_next = False  # whether the running launch's start began the next one too

    @property
    def gpus(self) -> list[Gpu]:
        """The GPUs of the running launch ([] without a pool)."""
        return self.lease.gpus if self.lease is not None else []

    @property
    def gpu_wait_s(self) -> float:
        """How long the running launch waited for its GPUs (0 without a pool)."""
        return self.lease.waited_s if self.lease is not None else 0.0

    @property
    def startup_wait_s(self) -> float:
        """The start-up the running launch's first trial waited for: all of it, or what was
        left of it when the launch had started beside the one before."""
        return self.starter.wait_s

    @property
    def started_beside(self) -> bool:
        return self.starter.started_beside

    def accuracy_beside(self, started: float, ended: float) -> None:
        """The running launch's accuracy pass ran from `started` to `ended` (the runtime's
        clock): what of it the launch starting beside hid is said by `accuracy_overlap_s`."""
        self.starter.accuracy_window = (started, ended)

    @property
    def accuracy_overlap_s(self) -> tuple[float, float] | None:
        """(seconds of the accuracy pass inside the start-up, the pass's seconds) of the launch
        before, when the running launch started beside it; None otherwise."""
        return self.starter.accuracy_overlap_s

    @property
    def gpu_share(self) -> float:
        """The running launch's share of the run's GPUs: what its time costs the budget."""
        if self.pool is None or self.lease is None:
            return 1.0
        return len(self.lease.gpus) / len(self.pool.gpus)

    def session_for(
        self,
        config: TrialConfig,
        on_phase: PhaseCallback | None,
        *,
        then: TrialConfig | None = None,
    ) -> tuple[EngineSession, bool]:
        """The running launch when it serves `config`, else a new one; (session, started).
        `then`: the launch the next trial needs, started beside a new one before it starts
        itself (LaunchStarter.begin), when it fits on the same GPUs; `beside_next` says
        whether it did."""
        current = self.serving(config)
        if current is not None:
            self.trials_on_session += 1
            return current, False
        beside = self.starter.has_beside(config)
        self.close(keep_lease=beside)  # one started beside takes over the GPUs it ran on
        self.on_new_launch()
        if self.pool is not None and not beside:
            self.lease = self.pool.acquire(config.tensor_parallel, on_wait=on_phase)
            if on_phase is not None:
                on_phase("on GPU " + ",".join(str(gpu.index) for gpu in self.lease.gpus))
        self.beside_next = then is not None and self._begin_beside(config, then)
        try:
            self.session = self.starter.open(config, gpus=self.gpus or None, on_phase=on_phase)
        except BaseException:
            self.close()
            raise
        self.trials_on_session = 1
        return self.session, True

    def serving(self, config: TrialConfig) -> EngineSession | None:
        """The running launch when it is up and serves `config`, else None."""
        current = self.session
        if current is not None and current.launch_key == config.launch_key() and current.alive():
            return current
        return None

    def open_aside(self, config: TrialConfig, on_phase: PhaseCallback | None) -> EngineSession:
        """A launch of `config` on the running launch's GPUs, beside it, for work between
        trials (the reference's later answers, autotune.study.run.reference_load); the caller
        closes it. Only while the running launch is idle: it never shares a load test."""
        opener = self.starter.opener(self.starter.runtime.open_session, self.gpus or None)
        return opener(self.plan.space, config, on_phase=on_phase)

    def _begin_beside(self, config: TrialConfig, then: TrialConfig) -> bool:
        if self.lease is not None and len(self.lease.gpus) != then.tensor_parallel:
            return False
        return self.starter.begin(then, running=config.launch_key(), gpus=self.gpus or None)

    def on_this_launch(self, trial: FrozenTrial) -> bool:
        """Whether `trial` ran (to its end or its race) on the launch that is still up."""
        session = self.session
        return (
            session is not None
            and session.alive()
            and TrialRecord.of(trial).launch_id in (session.launch_id, None)
            and trial.state in (TrialState.COMPLETE, TrialState.PRUNED)
        )

    def close(self, *, keep_lease: bool = False) -> None:
        """Stop the running launch (and one started beside it, unless `keep_lease`: it is
        about to take over the running one's GPUs)."""
        if self.session is not None:
            self.session.close()
        self.session = None
        self.trials_on_session = 0
        if keep_lease:
            return
        self.starter.close()
        if self.lease is not None:  # after the engine is down: its memory is free again
            self.lease.release()
        self.lease = None


class LaunchStarter:
    """Starts launches: waiting for each, or one beside the running launch (`begin`) that
    the trial needing it takes over (`open`)."""

    def __init__(self, plan: StudyPlan, runtime: Runtime) -> None:
        self.plan = plan
        self.runtime = runtime
        self.beside: PendingSession | None = None
        self.wait_s = 0.0  # what the last `open` waited for
        self.started_beside = False  # whether it had started beside the launch before
        self.begun_at = 0.0  # when the launch beside began (the runtime's clock)
        # The running launch's accuracy pass (start, end), and of the launch before.
        self.accuracy_window: tuple[float, float] | None = None
        self.accuracy_overlap_s: tuple[float, float] | None = None

    def has_beside(self, config: TrialConfig) -> bool:
        """Whether the launch started beside serves `config` (else it is stopped unused)."""
        if self.beside is not None and self.beside.launch_key != config.launch_key():
            self.close()
        return self.beside is not None

    def open(
        self, config: TrialConfig, *, gpus: list[Gpu] | None, on_phase: PhaseCallback | None
    ) -> EngineSession:
        """`config`'s launch, ready: the one started beside when it serves it."""
        pending = self.beside
        if pending is not None and pending.launch_key == config.launch_key():
            self.beside = None
        else:  # the launch started beside is another's: it keeps starting for its own trial
            pending = None
        self.started_beside = pending is not None
        window, self.accuracy_window, self.accuracy_overlap_s = self.accuracy_window, None, None
        if pending is not None:
            waited = self.runtime.clock()
            session = pending.start(on_phase=on_phase)
            self.wait_s = self.runtime.clock() - waited
            if window is not None:
                # Its start-up ran from `begun_at` until it first answered.
                ready = self.begun_at + session.startup_s
                inside = min(window[1], ready) - max(window[0], self.begun_at)
                self.accuracy_overlap_s = (max(0.0, inside), window[1] - window[0])
            return session
        session = self.opener(self.runtime.open_session, gpus)(
            self.plan.space, config, on_phase=on_phase
        )
        self.wait_s = session.startup_s
        return session

    def begin(
        self, config: TrialConfig, *, running: tuple[object, ...], gpus: list[Gpu] | None
    ) -> bool:
        """Start `config`'s launch now, beside the `running` one, so that the trial that needs
        it next finds it (nearly) up; True when it started. Only a server whose KV cache is
        sized from the memory left free (its share then leaves the running engine's alone),
        off the CPU (it would take the running engine's cores), and one at a time. A launch
        that cannot even begin is left to fail in its own trial."""
        backend = BACKENDS.get(config.backend)
        if (
            self.beside is not None
            or running == config.launch_key()
            or backend is None
            or not backend.sizes_cache_from_free_memory
            or self.plan.space.device == "cpu"
        ):
            return False
        begun = self.runtime.clock()
        try:
            self.beside = self.opener(self.runtime.begin_session, gpus)(self.plan.space, config)
        except TrialFailure:
            return False
        self.begun_at = begun
        return self.beside is not None

    def close(self) -> None:
        if self.beside is not None:
            self.beside.close()
        self.beside = None

    def opener(self, opens: Callable[..., T], gpus: list[Gpu] | None) -> Callable[..., T]:
        """`opens` (the runtime's open_session or begin_session) given what every launch of
        the study is opened with, on `gpus`."""
        plan = self.plan
        return functools.partial(
            opens,
            model_path=plan.model_path,
            evalset=plan.evalset,
            endpoint=plan.endpoint,
            image_geometry=plan.image_geometry,
            gpus=gpus,
            adapters=plan.adapters,
            quantized_paths=plan.quantized_paths,
        )
