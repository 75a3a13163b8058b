"""Load generation: N requests in flight (closed loop) or Poisson arrivals (open loop)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from autotune.client.chat import ChatPrompt, ChatReply

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
