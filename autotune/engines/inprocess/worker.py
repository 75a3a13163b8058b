"""The worker process: loads one engine once, then measures trial after trial.

Started by autotune.engines.inprocess.session as
`python -m autotune.engines.inprocess.worker LAUNCH.json`. It loads the model described there
and sends `{"ready": ...}`; then it reads one command per line on stdin (`{"measure": ...}` or
`{"quit": true}`) and answers each measurement with phase events and one `result` or `error`.

Events go to the original stdout, one JSON object per line; everything libraries print goes to
stderr (the log), so stray output can never corrupt the event stream. After an error the worker
exits: an engine that failed (out of memory, say) is not trusted with the next trial.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from pydantic import BaseModel

from autotune.accuracy.staged import look_at_answers
from autotune.engines.event_loop import run_to_end
from autotune.engines.inprocess.clock import EngineClock
from autotune.engines.phases import LoadOutcome, run_phases
from autotune.engines.session import EstimateCallback, MeasurePlan, cycled
from autotune.measure.convergence import SteadyRule, StopRuleMonitor
from autotune.measure.cpu_load import LoadSeen, own_process
from autotune.measure.repeats import ImageRepeats
from autotune.measure.steady import token_series
from autotune.params import TrialConfig
from autotune.records import SessionResult


class LaunchRequest(BaseModel):
    """What the worker loads: the model, where, and the launch-time configuration."""

    model: str
    device: str = "auto"
    evalset: str
    launch: TrialConfig
    adapters: list[dict[str, Any]] = []  # autotune.checkpoints.adapters.Adapter.to_dict()


class MeasureCommand(BaseModel):
    config: TrialConfig
    plan: MeasurePlan


class _Events:
    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def send(self, **event: Any) -> None:
        self.stream.write(json.dumps(event) + "\n")
        self.stream.flush()


def _batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Worker:
    """The loaded engine and the eval set's images, kept across trials."""

    def __init__(self, launch: LaunchRequest) -> None:
        from autotune.engines.inprocess.transformers import TransformersEngine
        from autotune.evalset.dataset import load_evalset

        self.evalset = load_evalset(launch.evalset)
        self.by_id = {item.id: item for item in self.evalset.items}
        self.ids = self.evalset.balanced_ids()  # the order load tests cycle
        self.images: dict[str, Any] = {}
        from autotune.checkpoints.adapters import Adapter

        self.engine = TransformersEngine(
            launch.model,
            launch.launch,
            device=launch.device,
            adapters=[Adapter.from_dict(a) for a in launch.adapters],
        )
        self.launch = launch.launch

    def load(self) -> float:
        started = time.perf_counter()
        self.engine.load()
        return time.perf_counter() - started

    def request(self, item_id: str, mark: int | None = None) -> Any:
        from autotune.records import Prompt

        if item_id not in self.images:
            self.images[item_id] = self.by_id[item_id].load_image()
        item = self.by_id[item_id]
        return Prompt(item_id=item_id, image=self.images[item_id], prompt=item.prompt, mark=mark)

    def measure(self, config: TrialConfig, plan: MeasurePlan, events: _Events) -> SessionResult:
        if config.launch_key() != self.launch.launch_key():
            raise RuntimeError("trial configuration does not match this worker's launch")
        from autotune.engines.memory import MemorySampler

        engine = self.engine
        engine.reset_peak_memory()
        # On a CPU the process's lifetime peak (ru_maxrss) would carry earlier trials' peaks
        # into this one: sample this trial's own RSS instead.
        rss = MemorySampler(os.getpid(), use_gpu=False, interval_s=0.05)
        if engine.device != "cuda":
            rss.start()
        driver = _BatchDriver(self, config, plan)
        passes = run_to_end(
            run_phases(
                driver,
                plan,
                config.batch_size,
                judge=functools.partial(look_at_answers, self.evalset),
                on_phase=lambda name: events.send(phase=name),
                on_estimate=lambda entry: events.send(estimate=entry),
            )
        )
        if engine.device == "cuda":
            peak_mib, memory_source = engine.peak_memory_mib()
        else:
            peak_mib, memory_source = rss.stop()[0], "rss"
        return SessionResult(
            **passes.model_dump(),
            peak_memory_mib=peak_mib,
            memory_source=memory_source,
            environment=engine.describe() | driver.busy,
        )


class _BatchDriver:
    """A trial's requests through the loaded model, a static batch at a time. The engine
    blocks while it generates: nothing else runs on this process's event loop."""

    def __init__(self, worker: Worker, config: TrialConfig, plan: MeasurePlan) -> None:
        self.worker = worker
        self.engine = worker.engine
        self.config = config
        self.plan = plan
        self.clock = worker.engine.clock  # on a CPU, blind to time spent waiting for a core
        self.workload = [worker.request(i) for i in cycled(worker.ids, plan.workload_requests)]
        # Static cache + compile recompiles for every new shape: every batch of the workload
        # runs once before the load, so compilation lands there and never in it.
        self.separate_warmup = config.compile_mode != "none"
        self.busy: dict[str, str] = {}  # how long the load waited for a core (_waited)

    def now(self) -> float:
        return self.clock.now()

    async def warm_up(self) -> None:
        for group in _batches(self.workload, self.config.batch_size):
            self.engine.generate(group, self.config, forced_tokens=self.plan.output_tokens)

    async def answer(
        self,
        ids: Sequence[str],
        concurrency: int,
        lengths: Mapping[str, int] | None = None,
        on_reply: Callable[[], None] | None = None,
    ) -> list[Any]:
        replies: list[Any] = []
        groups = _batches(self._shortest_first(ids, lengths), concurrency)
        # The next batch is prepared on a thread while the model answers this one: on a GPU
        # the processor's CPU work was a large share of the reference's pass, and so was
        # decoding every image before the first batch. Accuracy only: a load test's request
        # times include their own preparation, as a server's do.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prepare") as ahead:
            pending = ahead.submit(self._prepare, groups[0]) if groups else None
            for index in range(len(groups)):
                assert pending is not None
                group, ready = pending.result()
                if index + 1 < len(groups):
                    pending = ahead.submit(self._prepare, groups[index + 1])
                # Timed: a static batch decodes until its longest answer ends, as real answers
                # of these lengths would; each answer then counts its own length
                # (autotune.accuracy.timed).
                own = None if lengths is None else [lengths[r.item_id] for r in group]
                replies += self.engine.generate(
                    group,
                    self.config,
                    forced_tokens=None if own is None else max(own),
                    answer_tokens=own,
                    prepared=ready,
                    step_times=False,  # answers, not their timing: nothing waits per step
                )
                for _ in group:  # a static batch's answers arrive together
                    if on_reply is not None:
                        on_reply()
        by_id = {reply.item_id: reply for reply in replies}
        return [by_id[item_id] for item_id in ids]  # in the order asked, as a server's

    def _prepare(self, ids: list[str]) -> tuple[list[Any], Any]:
        """One batch's requests (their images decoded here, on the thread) and its tensors."""
        group = [self.worker.request(i) for i in ids]
        return group, self.engine.prepare(group, self.config)

    def _shortest_first(self, ids: Sequence[str], lengths: Mapping[str, int] | None) -> list[str]:
        """`ids` ordered by their expected answer's length (the forced one, or the item's
        first answer's): a static batch decodes until its longest answer ends, so batches of
        like lengths stop sooner. Greedy answers do not depend on the batch
        (tests/accuracy/test_output_neutral.py); callers read replies by item id."""

        def expected(item_id: str) -> int:
            if lengths is not None:
                return lengths[item_id]
            return len(self.worker.by_id[item_id].answers[0])

        return sorted(ids, key=expected)

    async def load_test(
        self, rule: SteadyRule, repeats: ImageRepeats, on_estimate: EstimateCallback | None
    ) -> LoadOutcome:
        engine, clock, worker = self.engine, self.clock, self.worker
        groups = _batches(self.workload, self.config.batch_size)
        timings: list[Any] = []
        load_start, waited_before = clock.now(), clock.waited_s()
        wall_start = time.perf_counter()
        # The load the machine put on the engine; racing reads it on a wall clock only (the
        # on-core clock leaves the wait out already).
        seen = LoadSeen(own_process)
        load = None if clock.on_core else seen.share
        monitor = StopRuleMonitor(
            rule, load_start, self.plan.warmup_requests, on_estimate, load=load
        )
        stop: str | None = None
        index = 0
        while stop is None:
            # Fresh images, or ones this trial sent before (autotune.measure.repeats).
            group = [
                worker.request(*repeats.next(request.item_id))
                for request in groups[index % len(groups)]
            ]
            index += 1
            completions = engine.generate(group, self.config, forced_tokens=self.plan.output_tokens)
            for completion in completions:
                timings.append(completion.timing)
                monitor.completed(completion.timing)
            # A static batch turns over all at once: the first batch is the first round (a
            # later batch's call changes nothing).
            monitor.turned_over(completions[-1].timing.end)
            now = clock.now()
            stop = monitor.look(now=now, series=token_series(timings, start=load_start, end=now))
        load_stop = clock.now()
        self.busy = _waited(clock, waited_before, wall_start) | seen.figures()
        return LoadOutcome(
            timings=timings,
            start=load_start,
            stop=load_stop,
            ended=load_stop,  # a static batch has nothing in flight after it
            stop_reason=stop,
            min_warmup_s=monitor.min_warmup_s,
            trail=monitor.trail,
        )


def _waited(clock: EngineClock, waited_before: float, wall_start: float) -> dict[str, str]:
    """The share of the load test the engine's thread spent waiting for a core: how busy the
    machine was while it measured (0 on an idle one; not measured on the wall clock)."""
    if not clock.on_core:
        return {}
    wall_s = time.perf_counter() - wall_start
    share = (clock.waited_s() - waited_before) / wall_s if wall_s > 0 else 0.0
    return {"run_queue_wait_share": f"{share:.3f}"}


def _failure_kind(exc: BaseException) -> str:
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or name == "OutOfMemoryError" or "out of memory" in str(exc):
        return "oom"
    return "error"


def _serve(worker: Worker, commands: IO[str], events: _Events) -> None:
    for line in commands:
        message = json.loads(line)
        if message.get("quit"):
            return
        command = MeasureCommand.model_validate(message["measure"])
        result = worker.measure(command.config, command.plan, events)
        # Python-mode dump: json.dumps keeps a NaN figure as NaN (JSON mode would send null).
        events.send(result=result.model_dump())


def main(argv: list[str]) -> int:
    # Keep the real stdout for events; send everything else (C-level prints too) to stderr.
    events = _Events(os.fdopen(os.dup(1), "w"))
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        with open(argv[0], encoding="utf-8") as handle:
            launch = LaunchRequest.model_validate_json(handle.read())
        worker = Worker(launch)
        events.send(phase="loading")
        startup_s = worker.load()
        events.send(ready={"startup_s": startup_s, "pid": os.getpid()})
        _serve(worker, sys.stdin, events)
    except BaseException as exc:  # report every failure as an event: the parent records it
        traceback.print_exc()
        events.send(error={"kind": _failure_kind(exc), "reason": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
