"""A simulated engine and clock under autotune's real study loop (bench/cpu/replay.py).

The loop is the one `autotune run` runs (autotune.study.run.loop.run_study: its sampler, launch
reuse, budget, racing, recording and recommendation). Two things are replaced:

- the engine: `ReplaySession` measures a trial through the phases every engine runs
  (autotune.engines.phases.run_phases) on `ReplayDriver`, whose load test is drawn from the
  response surface (replay_surface.py). Requests run in `batch_size` lanes, back to back, each
  as long as the surface's rate says times its own noise; the real stop rule of the trial's
  measure plan (racing included) is shown the load every simulated second and decides when it
  ends;
- the clock: the study's trial time (what its budget counts) is read from `SimClock`, which
  the session advances by the start-up, the load and a fixed recording time instead of
  sleeping. A 30-minute study replays in seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
import replay_surface as surface

from autotune.engines.phases import LoadOutcome, run_phases
from autotune.engines.session import EstimateCallback, MeasurePlan, PhaseCallback, new_launch_id
from autotune.measure.convergence import SteadyRule, StopRuleMonitor
from autotune.measure.repeats import ImageRepeats
from autotune.measure.steady import token_series
from autotune.measure.timing import RequestTiming
from autotune.params import TrialConfig
from autotune.records import Reply, SessionResult

CHECK_EVERY_S = 1.0  # the HTTP client's monitor looks at the load about this often
RECORDING_S = 1.0  # judging, the storage's writes: measured 0.1-0.7 s a trial on the H200


class SimClock:
    """Simulated seconds: `seconds` is the study loop's clock (autotune.study.run.runtime)."""

    def __init__(self) -> None:
        self.now = 0.0

    def seconds(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


class LaunchStreams:
    """One random stream per launch, drawn from the seed, the launch's parameters and how
    many launches of them came before: a launch's noise is the same whenever it starts, so
    two study policies replayed with one seed differ only by what they do (common random
    numbers), not by the order in which their launches drew from a shared stream."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.started: dict[str, int] = {}

    def next(self, launch: TrialConfig) -> np.random.Generator:
        key = repr(launch.launch_key())
        count = self.started.get(key, 0)
        self.started[key] = count + 1
        digest = hashlib.sha256(key.encode()).digest()
        return np.random.default_rng([self.seed, int.from_bytes(digest[:8], "big"), count])


class ReplaySession:
    """One launch of the surface's engine, measured trial after trial (EngineSession)."""

    def __init__(
        self,
        launch: TrialConfig,
        clock: SimClock,
        rng: np.random.Generator,
        *,
        wait: bool = True,
    ) -> None:
        """`wait`: the clock runs through its start-up now (else `ready_at` says when it is
        up: a launch started beside another, ReplayPending)."""
        self.launch = launch
        self.launch_key = launch.launch_key()
        self.launch_id = new_launch_id()
        self.clock = clock
        self.rng = rng
        self.offset = float(rng.normal(1.0, surface.LAUNCH_SD))  # this launch's own level
        # Its rate swings in waves of prefill and decode: a phase that turns once a period,
        # drifting at random (replay_surface.WAVE_*).
        self.wave_phase = float(rng.uniform(0.0, 2 * np.pi))
        self.wave_period_s = float(rng.uniform(*surface.WAVE_PERIOD_S))
        self.startup_s = surface.startup_s(launch.model_dump())
        self.ready_at = clock.now + self.startup_s
        if wait:
            clock.advance(self.startup_s)

    def start(self, *, on_phase: PhaseCallback | None = None) -> ReplaySession:
        """A launch started beside another (PendingSession): the clock runs on to when it is
        up. The surface knows no contention: the launch it overlaps measures as if alone."""
        self.clock.advance(self.ready_at - self.clock.now)
        return self

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        pass

    def measure(
        self,
        config: TrialConfig,
        plan: MeasurePlan,
        *,
        on_phase: PhaseCallback | None = None,
        on_estimate: EstimateCallback | None = None,
    ) -> SessionResult:
        """The trial's phases, as every engine runs them; the surface answers nothing, so a
        replay study runs without accuracy (judge None)."""
        driver = ReplayDriver(self, config, plan)
        phases = run_phases(
            driver, plan, config.batch_size, judge=None, on_phase=on_phase, on_estimate=on_estimate
        )
        passes = asyncio.run(phases)
        self.clock.advance(passes.load_s + RECORDING_S)
        return SessionResult(
            **dict(passes),
            peak_memory_mib=40000.0,
            memory_source="replay",
            environment=self._environment(),
        )

    def _environment(self) -> dict[str, str]:
        """What a real launch records: LMDeploy through its server (the deploy target, so
        deployable as measured), the transformers reference in-process."""
        env = {"replay_launch_rate_offset": f"{self.offset:.4f}", "device": "cuda"}
        if self.launch.backend == "transformers":
            return env | {"runner": "inprocess"}
        return env | {"runner": "server", "server_format": self.launch.backend}

    def swing(self, seconds: float) -> float:
        """The launch's pace after `seconds` more, between -1 and 1: its wave's phase turns
        at its period and drifts by a random walk (WAVE_DRIFT radians per root second)."""
        drift = surface.WAVE_DRIFT * np.sqrt(seconds) * float(self.rng.standard_normal())
        self.wave_phase += 2 * np.pi * seconds / self.wave_period_s + drift
        return float(np.sin(self.wave_phase))


class ReplayDriver:
    """One trial's requests on the surface (autotune.engines.phases.PhaseDriver): closed-loop
    lanes at the trial's concurrency, instants in simulated seconds from the load's start."""

    separate_warmup = False  # as a server's: the load warms up in its own first seconds

    def __init__(self, session: ReplaySession, config: TrialConfig, plan: MeasurePlan) -> None:
        self.session = session
        self.plan = plan
        self.batch = config.batch_size
        self.lengths = plan.answer_lengths()
        self.mean_tokens = plan.output_tokens or 128
        rate = surface.tokens_per_s(config.model_dump()) * session.offset
        self.per_request_s = self.batch * self.mean_tokens / rate  # at the steady rate
        self.lanes = [0.0] * self.batch  # when each lane's next request starts
        self.started = 0
        self.in_flight: list[RequestTiming] = []
        self.clock_s = 0.0

    def now(self) -> float:
        return self.clock_s

    async def warm_up(self) -> None:
        return None

    async def answer(
        self, ids: Sequence[str], concurrency: int, lengths: Mapping[str, int] | None = None
    ) -> list[Reply]:
        raise NotImplementedError("the surface answers nothing: a replay runs without accuracy")

    async def load_test(
        self, rule: SteadyRule, repeats: ImageRepeats, on_estimate: EstimateCallback | None
    ) -> LoadOutcome:
        """Every simulated second the lanes start what they can and the rule looks at what
        ended; after its stop the requests in flight drain. No image is sent: `repeats` is
        not drawn from."""
        monitor = StopRuleMonitor(rule, 0.0, self.plan.warmup_requests, on_estimate)
        done: list[RequestTiming] = []
        stop: str | None = None
        while stop is None:
            self.clock_s += CHECK_EVERY_S
            done += self._completed(monitor, self._run_until(self.clock_s))
            if done:
                series = token_series(done, start=0.0, end=self.clock_s)
                stop = monitor.look(now=self.clock_s, series=series)
        drained, self.in_flight = sorted(self.in_flight, key=lambda t: t.end), []
        done += self._completed(monitor, drained)
        return LoadOutcome(
            timings=done,
            start=0.0,
            stop=self.clock_s,
            ended=max((t.end for t in done), default=0.0),
            stop_reason=stop,
            min_warmup_s=monitor.min_warmup_s,
            trail=monitor.trail,
        )

    def _completed(
        self, monitor: StopRuleMonitor, ended: list[RequestTiming]
    ) -> list[RequestTiming]:
        """Shows the monitor the requests that ended (in order of their ends). The replay's
        first round turns over once as many requests as lanes have ended."""
        for timing in ended:
            monitor.completed(timing)
        if len(monitor.ends) >= self.batch:
            monitor.turned_over(monitor.ends[self.batch - 1])
        return ended

    def _run_until(self, now: float) -> list[RequestTiming]:
        """Each lane starts its requests until `now`; those that ended by then leave the
        flight, in order of their ends."""
        pace = 1.0 + surface.WAVE_AMPLITUDE * self.session.swing(CHECK_EVERY_S)
        for lane in range(self.batch):
            while self.lanes[lane] < now and self.started < self.plan.max_requests:
                timing = self._request(self.lanes[lane], pace)
                self.in_flight.append(timing)
                self.lanes[lane] = timing.end
                self.started += 1
        ended = sorted((t for t in self.in_flight if t.end <= now), key=lambda t: t.end)
        self.in_flight = [t for t in self.in_flight if t.end > now]
        return ended

    def _request(self, start: float, pace: float) -> RequestTiming:
        """The next request of a lane free at `start`; the load's first `batch` requests
        (its first round) run at WARMUP_RATE_SHARE of the rate."""
        tokens = self.lengths.next() if self.lengths is not None else self.mean_tokens
        slow = 1.0 / surface.WARMUP_RATE_SHARE if self.started < self.batch else 1.0
        rng = self.session.rng
        noise = float(rng.lognormal(-(surface.REQUEST_CV**2) / 2, surface.REQUEST_CV))
        e2e = self.per_request_s * tokens / self.mean_tokens * noise * slow / pace
        first = start + e2e * (0.05 + 0.42 * self.batch / 64)  # TTFT: ~47% at 64
        return RequestTiming(start, first, start + e2e, start + e2e, tokens)
