"""Load generation: N requests in flight (closed loop) or Poisson arrivals (open loop).

`closed_loop_until` keeps N requests in flight over a repeated workload, from the first request
on, until a stop rule says the rate has settled and is known (autotune.measure.convergence);
the requests still in flight then finish, and the instant of the stop ends the measured window.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from autotune.measure.convergence import (
    MAX_REQUESTS,
    SteadyRule,
    StopRuleMonitor,
    first_round_end,
)
from autotune.measure.steady import BIN_S, token_arrivals
from autotune.measure.timing import RequestTiming
from autotune.records import Prompt, Reply

Send = Callable[[Prompt], Coroutine[Any, Any, Reply]]
T = TypeVar("T")

# How often a running load is shown to the stop rule.
CHECK_EVERY_S = 0.25


async def _gather_or_cancel(tasks: list[asyncio.Task[T]]) -> list[T]:
    """All results in order; on the first failure the other requests are cancelled, not left."""
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def closed_loop(send: Send, prompts: Sequence[Prompt], concurrency: int) -> list[Reply]:
    """Keep `concurrency` requests in flight until every prompt is answered; results in order."""
    results: list[Reply | None] = [None] * len(prompts)
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(prompts):
            index = next_index
            next_index += 1  # no await in between: the event loop cannot interleave here
            results[index] = await send(prompts[index])

    workers = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, len(prompts))))]
    await _gather_or_cancel(workers)
    return [reply for reply in results if reply is not None]


class LiveTokens:
    """Output tokens as they arrive, per BIN_S bin since the load began: what the stop rule sees
    while requests are still running.

    A chunk of text is not a token: a busy server coalesces what it decoded since its last event (a
    few chunks for an answer of many tokens, and fewer as the load goes on), so a count of
    chunks is neither the rate nor a steady proxy for it. A chunk counts once when it arrives;
    when its request completes (`settle`), its chunks are re-weighted by the request's usage
    tokens, exactly as the recorded figure weighs them (autotune.measure.steady.token_series).
    Chunks of requests still in flight count as the completed requests' mean tokens per chunk.
    """

    def __init__(self) -> None:
        self.start: float | None = None
        self._settled: list[float] = []  # tokens of completed requests
        self._pending: list[float] = []  # chunks of requests still in flight
        self._tokens = 0.0
        self._chunks = 0

    def begin(self, start: float) -> None:
        self.start = start
        self._settled, self._pending = [], []
        self._tokens, self._chunks = 0.0, 0

    def _index(self, at: float) -> int | None:
        if self.start is None or at < self.start:
            return None
        index = int((at - self.start) / BIN_S)
        for grown in (self._settled, self._pending):
            if index >= len(grown):
                grown.extend([0.0] * (index + 1 - len(grown)))
        return index

    def add(self, at: float) -> None:
        index = self._index(at)
        if index is not None:
            self._pending[index] += 1.0

    def settle(self, timing: RequestTiming) -> None:
        """`timing`'s request completed: its chunks (each reported to `add`) now weigh its
        usage tokens, placed as the recorded figure places them (steady.token_arrivals)."""
        if timing.output_tokens <= 0:
            return
        for at in timing.chunk_times:
            index = self._index(at)
            if index is not None:
                self._pending[index] -= 1.0
        if timing.chunk_times:
            self._tokens += timing.output_tokens
            self._chunks += len(timing.chunk_times)
        arrivals, each = token_arrivals(timing)
        for at in arrivals:
            index = self._index(float(at))
            if index is not None:
                self._settled[index] += each

    def series(self, now: float) -> np.ndarray:
        """Whole bins up to `now`: the bin still filling is left out."""
        if self.start is None:
            return np.zeros(0)
        bins = max(0, int((now - self.start) / BIN_S))
        per_chunk = self._tokens / self._chunks if self._chunks else 1.0
        counts = np.zeros(bins)
        known = min(bins, len(self._settled))
        counts[:known] = np.asarray(self._settled[:known]) + per_chunk * np.asarray(
            self._pending[:known]
        )
        return counts


@dataclass
class LoadRun:
    """One load test: its replies and the instants (perf_counter) that bound it."""

    replies: list[Reply]
    start: float
    stop: float  # when it stopped starting requests; the replies still running then drained
    stop_reason: str
    min_warmup_s: float  # the first round's turnover, from `start`
    # What the stop rule saw every TRAIL_EVERY_S: why a load stopped where it did.
    trail: list[dict[str, float | bool | str | None]] = field(default_factory=list)


async def closed_loop_until(
    send: Send,
    workload: Sequence[Prompt],
    concurrency: int,
    rule: SteadyRule,
    *,
    live: LiveTokens,
    min_warmup_requests: int = 1,
    check_every_s: float = CHECK_EVERY_S,
    on_estimate: Callable[[dict[str, Any]], None] | None = None,
    load: Callable[[], float | None] | None = None,
) -> LoadRun:
    """Cycle `workload` with `concurrency` requests in flight until `rule` stops it.
    `load`: the engine's wait share for a core so far, which racing reads
    (autotune.measure.cpu_load).

    The load is one from its first request: the rule cuts its warm-up where the rate settles
    (autotune.measure.convergence). `send` must report its chunks to `live` (the reply's
    chunk_times, the same instants). The replies are
    in order of completion; those in flight at the stop drain before this returns.
    """
    # The stop rule's statistics, imported before the first request: imported at its first
    # check (autotune.measure.steady), scipy held the event loop for 1-5 s while answers
    # streamed, and the first load test of every process measured that stall (an endpoint
    # trial of 0.3 s requests recorded one request of 3.6 s).
    import scipy.stats  # noqa: F401

    concurrency = max(1, concurrency)
    replies: list[Reply] = []
    started = 0
    stop: str | None = None
    stop_at = 0.0
    first_round_left = concurrency
    t0 = time.perf_counter()
    live.begin(t0)
    rule_monitor = StopRuleMonitor(rule, t0, min_warmup_requests, on_estimate, load=load)

    def stop_now(reason: str) -> None:
        nonlocal stop, stop_at
        if stop is None:
            stop, stop_at = reason, time.perf_counter()

    async def worker() -> None:
        nonlocal started, first_round_left
        first = True
        while stop is None and started < rule.max_requests:
            prompt = workload[started % len(workload)]
            started += 1  # no await in between: the event loop cannot interleave here
            if started >= rule.max_requests:
                stop_now(MAX_REQUESTS)
            reply = await send(prompt)
            live.settle(reply.timing)
            replies.append(reply)
            rule_monitor.completed(reply.timing)
            if first:  # the first round turns over when every worker's first request has ended
                first = False
                first_round_left -= 1
                if first_round_left == 0:
                    rule_monitor.turned_over(reply.timing.end)

    async def watch() -> None:
        while stop is None:
            await asyncio.sleep(check_every_s)
            now = time.perf_counter()
            rule_monitor.look(now=now, series=live.series(now), on_stop=stop_now)

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    tasks.append(asyncio.create_task(watch()))
    await _gather_or_cancel(tasks)
    if stop == MAX_REQUESTS:  # the workers stopped at the cap, not the rule
        rule_monitor.stopped_by_the_loop(MAX_REQUESTS, now=stop_at, series=live.series(stop_at))
    return LoadRun(
        replies=replies,
        start=t0,
        stop=stop_at,
        stop_reason=stop or MAX_REQUESTS,
        min_warmup_s=rule_monitor.min_warmup_s,
        trail=rule_monitor.trail,
    )


async def open_loop(
    send: Send,
    prompts: Sequence[Prompt],
    rate_per_s: float,
    *,
    seed: int,
    live: LiveTokens | None = None,
    min_warmup_requests: int = 1,
) -> LoadRun:
    """Start requests at Poisson arrival times (mean `rate_per_s`), however many are in flight.

    Arrivals follow a fixed schedule from a seeded generator, so two trials offer the same load;
    a slow server then shows as growing latency rather than as a lower offered rate. The load
    stops when the last request is sent; its warm-up is cut like a closed loop's.
    """
    rng = random.Random(seed)
    t0 = time.perf_counter()
    if live is not None:
        live.begin(t0)
    at = 0.0
    tasks: list[asyncio.Task[Reply]] = []
    try:
        for prompt in prompts:
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(prompt)))
            at += rng.expovariate(rate_per_s)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    stop = time.perf_counter()
    replies = await _gather_or_cancel(tasks)
    ends = sorted(reply.timing.end for reply in replies)
    return LoadRun(
        replies=sorted(replies, key=lambda reply: reply.timing.end),
        start=t0,
        stop=stop,
        stop_reason="fixed schedule (open loop)",
        min_warmup_s=first_round_end(ends, start=t0, min_requests=min_warmup_requests),
    )
