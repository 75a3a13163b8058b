"""The measured passes over HTTP: warm-up, load test and accuracy, as the worker runs them.

The same requests in the same order as autotune.engines.inprocess.worker: warm-up on the first
items, then `workload.requests` measured requests cycling the eval items, then one answer per item.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import cycle, islice
from typing import Any

import httpx

from autotune.client.chat import ChatClient, ChatPrompt
from autotune.client.load import closed_loop, open_loop
from autotune.params import TrialConfig


@dataclass(frozen=True)
class PassPlan:
    """What to send: the prompts, the decoding fields and the load shape."""

    prompts: Sequence[ChatPrompt]
    config: TrialConfig
    fields: dict[str, Any]
    warmup_requests: int
    requests: int
    request_rate_per_s: float | None
    measure_accuracy: bool


def http_client(concurrency: int) -> httpx.AsyncClient:
    # trust_env=False: a proxy from the environment must never sit between us and the server.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=10.0, read=None, write=60.0, pool=None),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=concurrency),
        trust_env=False,
    )


async def run_passes(
    base_url: str,
    model: str,
    plan: PassPlan,
    *,
    on_phase: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Warm-up, load test and accuracy through one server; the worker's result fields."""
    config = plan.config
    batch = config.batch_size

    def phase(name: str) -> None:
        if on_phase is not None:
            on_phase(name)

    async with http_client(batch) as client:
        chat = ChatClient(
            client,
            base_url=base_url,
            model=model,
            fields=plan.fields,
            image_max_side=config.image_max_side,
        )
        # Whole rounds of `batch` warm-up requests, as the worker warms up whole batches.
        n_warm = -(-plan.warmup_requests // batch) * batch
        phase("warm-up")
        t0 = time.perf_counter()
        await closed_loop(chat.send, list(islice(cycle(plan.prompts), n_warm)), batch)
        compile_s = time.perf_counter() - t0

        phase("load test")
        workload = list(islice(cycle(plan.prompts), plan.requests))
        if plan.request_rate_per_s is None:
            replies = await closed_loop(chat.send, workload, batch)
        else:
            replies = await open_loop(
                chat.send, workload, plan.request_rate_per_s, seed=config.seed
            )
        timings = [reply.timing.to_dict() for reply in replies]

        predictions: dict[str, str] | None = None
        if plan.measure_accuracy:
            phase("accuracy")
            answers = await closed_loop(chat.send, plan.prompts, batch)
            predictions = {reply.item_id: reply.text for reply in answers}
    return {"compile_s": compile_s, "timings": timings, "predictions": predictions}
