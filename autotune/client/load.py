"""Load generation: N requests in flight (closed loop) or Poisson arrivals (open loop).

`closed_loop_until` keeps N requests in flight over a repeated workload until a stop rule says
the throughput is known (autotune.measure.convergence); the requests still in flight then
finish, and the count of completions at the stop marks where the steady load ended.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from autotune.client.chat import ChatPrompt, ChatReply
from autotune.measure.convergence import StopRule

Send = Callable[[ChatPrompt], Coroutine[Any, Any, ChatReply]]
T = TypeVar("T")


async def _gather_or_cancel(tasks: list[asyncio.Task[T]]) -> list[T]:
    """All results in order; on the first failure the other requests are cancelled, not left."""
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def closed_loop(
    send: Send, prompts: Sequence[ChatPrompt], concurrency: int
) -> list[ChatReply]:
    """Keep `concurrency` requests in flight until every prompt is answered; results in order."""
    results: list[ChatReply | None] = [None] * len(prompts)
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


async def closed_loop_until(
    send: Send, workload: Sequence[ChatPrompt], concurrency: int, rule: StopRule
) -> tuple[list[ChatReply], int, str]:
    """Cycle `workload` with `concurrency` requests in flight until `rule` stops it.

    Returns the replies in order of completion, how many had completed when the rule said
    stop (the steady part), and the rule's reason.
    """
    replies: list[ChatReply] = []
    started = 0
    stop: str | None = None
    steady = 0
    t0 = time.perf_counter()

    async def worker() -> None:
        nonlocal started, stop, steady
        while stop is None and started < rule.max_requests:
            prompt = workload[started % len(workload)]
            started += 1  # no await in between: the event loop cannot interleave here
            reply = await send(prompt)
            replies.append(reply)
            # The rule only changes its mind at block boundaries; checking there keeps a long
            # load test linear in its requests.
            if stop is None and (
                len(replies) % rule.block_size == 0 or started >= rule.max_requests
            ):
                stop = rule.reason_to_stop([r.timing for r in replies], time.perf_counter() - t0)
                if stop is not None:
                    steady = len(replies)

    workers = [asyncio.create_task(worker()) for _ in range(max(1, concurrency))]
    await _gather_or_cancel(workers)
    return replies, steady or len(replies), stop or "max_requests"


async def open_loop(
    send: Send, prompts: Sequence[ChatPrompt], rate_per_s: float, *, seed: int
) -> list[ChatReply]:
    """Start requests at Poisson arrival times (mean `rate_per_s`), however many are in flight.

    Arrivals follow a fixed schedule from a seeded generator, so two trials offer the same load;
    a slow server then shows as growing latency rather than as a lower offered rate.
    """
    rng = random.Random(seed)
    t0 = time.perf_counter()
    at = 0.0
    tasks: list[asyncio.Task[ChatReply]] = []
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
    return await _gather_or_cancel(tasks)
