"""A trial's phases through a server over HTTP (autotune.engines.phases decides the phases).

The same requests in the same order as autotune.engines.inprocess.worker: a load test that
cycles the first `plan.workload_requests` items at the trial's concurrency until the rate has
settled and is known (autotune.measure.convergence), then one answer per accuracy item.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.client.chat import ChatClient, http_client
from autotune.client.load import LiveTokens, closed_loop, closed_loop_until, open_loop
from autotune.engines.phases import Judge, LoadOutcome, run_phases
from autotune.engines.session import EstimateCallback, MeasurePlan, cycled
from autotune.measure.convergence import SteadyRule
from autotune.measure.repeats import ImageRepeats
from autotune.params import TrialConfig
from autotune.records import PassesResult, Prompt, Reply

# How a load-test request asks for an answer of exactly this many tokens (per server format).
ForcedFields = Callable[[int], dict[str, Any]]


class _ServerDriver:
    """A trial's requests over HTTP: answers through the trial's own fields, the load test at
    its concurrency (closed loop) or offered rate (open loop)."""

    separate_warmup = False  # a server's load warms up in its own first seconds

    def __init__(
        self,
        same_server: Callable[..., ChatClient],
        by_id: dict[str, Prompt],
        config: TrialConfig,
        plan: MeasurePlan,
        forced_fields: ForcedFields | None,
        answer_fields: ForcedFields | None = None,
        load: Callable[[], float | None] | None = None,
    ) -> None:
        self.load = load  # the engine's wait share for a core, which racing reads
        self.same_server = same_server
        self.chat = same_server()
        self.by_id = by_id
        self.config = config
        self.plan = plan
        self.forced_fields = forced_fields
        self.answer_fields = answer_fields

    def now(self) -> float:
        return time.perf_counter()

    async def warm_up(self) -> None:
        return None

    async def answer(
        self,
        ids: Sequence[str],
        concurrency: int,
        lengths: Mapping[str, int] | None = None,
        on_reply: Callable[[], None] | None = None,
    ) -> list[Reply]:
        prompts = [self.by_id[i] for i in ids]
        answer_fields = self.answer_fields

        async def send(prompt: Prompt) -> Reply:
            if lengths is None or answer_fields is None:
                reply = await self.chat.send(prompt)
            else:
                reply = await self.chat.send(prompt, answer_fields(lengths[prompt.item_id]))
            if on_reply is not None:
                on_reply()
            return reply

        return await closed_loop(send, prompts, concurrency)

    async def load_test(
        self, rule: SteadyRule, repeats: ImageRepeats, on_estimate: EstimateCallback | None
    ) -> LoadOutcome:
        plan, config, by_id = self.plan, self.config, self.by_id
        ids = list(by_id)
        # The load test's client also feeds each streamed chunk to the live series its stop
        # rule reads.
        live = LiveTokens()
        load_chat = self.same_server(on_chunk=live.add)
        forced_fields = self.forced_fields
        lengths = plan.answer_lengths() if forced_fields is not None else None

        async def send_load(prompt: Prompt) -> Reply:
            # A fresh image, or one this trial sent before (autotune.measure.repeats), and the
            # next forced length: both drawn before the first await, so in start order.
            item_id, mark = repeats.next(prompt.item_id)
            extra = forced_fields(lengths.next()) if forced_fields and lengths else None
            return await load_chat.send(dataclasses.replace(by_id[item_id], mark=mark), extra)

        if plan.request_rate_per_s is None:
            # A server batches whatever is in flight: the load runs at the trial's own
            # concurrency from its first request, and its start is the warm-up, cut where
            # the rate settles (autotune.measure.steady).
            workload = [by_id[i] for i in cycled(ids, plan.workload_requests)]
            run = await closed_loop_until(
                send_load,
                workload,
                config.batch_size,
                rule,
                live=live,
                min_warmup_requests=plan.warmup_requests,
                on_estimate=on_estimate,
                load=self.load,
            )
        else:
            # An offered load is a fixed schedule of two passes: its length is part of what is
            # measured, so it does not stretch until the interval closes.
            schedule = [by_id[i] for i in cycled(ids, plan.min_requests)]
            run = await open_loop(
                send_load,
                schedule,
                plan.request_rate_per_s,
                seed=config.seed,
                live=live,
                min_warmup_requests=plan.warmup_requests,
            )
        return LoadOutcome(
            timings=[reply.timing for reply in run.replies],
            start=run.start,
            stop=run.stop,
            ended=time.perf_counter(),
            stop_reason=run.stop_reason,
            min_warmup_s=run.min_warmup_s,
            trail=run.trail,
        )


async def run_passes(
    base_url: str,
    model: str,
    *,
    prompts: Sequence[Prompt],
    config: TrialConfig,
    fields: dict[str, Any],
    plan: MeasurePlan,
    forced_fields: ForcedFields | None = None,
    answer_fields: ForcedFields | None = None,
    on_phase: Callable[[str], None] | None = None,
    on_estimate: EstimateCallback | None = None,
    judge: Judge | None = None,
    load: Callable[[], float | None] | None = None,
) -> PassesResult:
    """A trial's phases (autotune.engines.phases) through one server; `load`: the server's
    wait share for a core (autotune.measure.cpu_load), which racing reads.

    `forced_fields(tokens)` join the load test's requests only: they make each answer as long
    as `plan.answer_lengths()` says (autotune.export.forced_length), so trials do equal work.
    Screening and accuracy send the trial's own `fields` alone, but for a timed pass
    (`plan.timed`), whose answers `answer_fields(tokens)` force to each item's length.
    """
    by_id = {prompt.item_id: prompt for prompt in prompts}
    async with http_client(max(config.batch_size, plan.accuracy_batch_size)) as client:
        same_server = functools.partial(
            ChatClient,
            client,
            base_url=base_url,
            model=model,
            fields=fields,
            image_max_side=config.image_max_side,
        )
        driver = _ServerDriver(same_server, by_id, config, plan, forced_fields, answer_fields, load)
        return await run_phases(
            driver,
            plan,
            config.batch_size,
            judge=judge,
            on_phase=on_phase,
            on_estimate=on_estimate,
        )
