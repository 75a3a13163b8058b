"""A simulated engine and clock under autotune's real study loop (bench/cpu/replay.py).

The loop is the one `autotune run` runs (autotune.study.run.loop.run_study: its sampler, launch
reuse, budget, racing, recording and recommendation). Two things are replaced:

- the engine: `ReplaySession` answers a trial with a load test drawn from the response
  surface (replay_surface.py). Requests run in `batch_size` lanes, back to back, each as long
  as the surface's rate says times its own noise; the real stop rule of the trial's measure
  plan (racing included) is shown the load every simulated second and decides when it ends;
- the clock: the study's trial time (what its budget counts) is read from `SimClock`, which
  the session advances by the start-up, the load and a fixed recording time instead of
  sleeping. A 30-minute study replays in seconds.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import replay_surface as surface

from autotune.engines.session import EstimateCallback, MeasurePlan, PhaseCallback, new_launch_id
from autotune.measure.convergence import StopRuleMonitor
from autotune.measure.steady import token_series
from autotune.measure.timing import RequestTiming
from autotune.params import TrialConfig
from autotune.records import SessionResult

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
        values = config.model_dump()
        rate = surface.tokens_per_s(values) * self.offset
        timings, stop, trail, min_warmup, stopped_at = self._load(
            config.batch_size, rate, plan, on_estimate
        )
        load_s = max((t.end for t in timings), default=0.0)  # the requests in flight drain
        self.clock.advance(load_s + RECORDING_S)
        return SessionResult(
            load_s=load_s,
            load_start=0.0,
            load_stop=stopped_at,
            min_warmup_s=min_warmup,
            timings=timings,
            stop_reason=stop,
            stop_rule_trail=trail,
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

    def _swing(self, seconds: float) -> float:
        """The launch's pace after `seconds` more, between -1 and 1: its wave's phase turns
        at its period and drifts by a random walk (WAVE_DRIFT radians per root second)."""
        drift = surface.WAVE_DRIFT * np.sqrt(seconds) * float(self.rng.standard_normal())
        self.wave_phase += 2 * np.pi * seconds / self.wave_period_s + drift
        return float(np.sin(self.wave_phase))

    def _load(
        self, batch: int, rate: float, plan: MeasurePlan, on_estimate: EstimateCallback | None
    ) -> tuple[list[RequestTiming], str, list[dict[str, Any]], float, float]:
        """Closed-loop lanes until the plan's rule stops the load (times from its start)."""
        lengths = plan.answer_lengths()
        mean_tokens = plan.output_tokens or 128
        per_request_s = batch * mean_tokens / rate  # at the steady rate
        lanes = [0.0] * batch  # when each lane's next request starts
        timings: list[RequestTiming] = []
        monitor = StopRuleMonitor(plan.rule(), 0.0, plan.warmup_requests, on_estimate)
        stop: str | None = None
        now, started, min_warmup = 0.0, 0, 0.0
        while stop is None:
            now += CHECK_EVERY_S
            pace = 1.0 + surface.WAVE_AMPLITUDE * self._swing(CHECK_EVERY_S)
            for lane in range(batch):
                while lanes[lane] < now and started < plan.max_requests:
                    tokens = lengths.next() if lengths is not None else mean_tokens
                    first_round = started < batch
                    slow = 1.0 / surface.WARMUP_RATE_SHARE if first_round else 1.0
                    noise = float(
                        self.rng.lognormal(-(surface.REQUEST_CV**2) / 2, surface.REQUEST_CV)
                    )
                    e2e = per_request_s * tokens / mean_tokens * noise * slow / pace
                    start = lanes[lane]
                    first = start + e2e * (0.05 + 0.42 * batch / 64)  # TTFT: ~47% at 64
                    timings.append(RequestTiming(start, first, start + e2e, start + e2e, tokens))
                    lanes[lane] = start + e2e
                    started += 1
            done = sorted((t for t in timings if t.end <= now), key=lambda t: t.end)
            if not done:
                continue
            ends = [t.end for t in done]
            # The load's floor so far, even before its first round has turned over (what the
            # session records when the cap stops a load that early).
            min_warmup = monitor.warmup_floor_s(ends, ends[min(batch, len(ends)) - 1])
            stop = monitor.look(
                now=now,
                series=token_series(done, start=0.0, end=now),
                ends=ends,
                e2e_s=[t.e2e_s for t in done],
                turnover_s=ends[batch - 1] if len(done) >= batch else None,
            )
        return sorted(timings, key=lambda t: t.end), stop, monitor.trail, min_warmup, now
