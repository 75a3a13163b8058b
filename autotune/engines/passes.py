"""The measured passes over HTTP: the load test and accuracy, as the worker runs them.

The same requests in the same order as autotune.engines.inprocess.worker: a load test that
cycles the first `plan.workload_requests` items at the trial's concurrency until the rate has
settled and is known (autotune.measure.convergence), then one answer per accuracy item.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from autotune.accuracy.screening import ScreeningRequest
from autotune.client.chat import ChatClient, http_client
from autotune.client.load import LiveTokens, closed_loop, closed_loop_until, open_loop
from autotune.engines.session import MeasurePlan, cycled
from autotune.measure.convergence import RACED
from autotune.measure.repeats import ImageRepeats
from autotune.params import TrialConfig
from autotune.records import PassesResult, Prompt, Reply

# How a load-test request asks for an answer of exactly this many tokens (per server format).
ForcedFields = Callable[[int], dict[str, Any]]
# Whether screening answers already miss the floor with confidence (accuracy.screening.hopeless
# over the session's eval set).
Screen = Callable[[dict[str, str], ScreeningRequest], bool]


async def run_passes(
    base_url: str,
    model: str,
    *,
    prompts: Sequence[Prompt],
    config: TrialConfig,
    fields: dict[str, Any],
    plan: MeasurePlan,
    forced_fields: ForcedFields | None = None,
    on_phase: Callable[[str], None] | None = None,
    screen: Screen | None = None,
) -> PassesResult:
    """Load test (its warm-up included) and accuracy through one server.

    `forced_fields(tokens)` join the load test's requests only: they make each answer as long
    as `plan.answer_lengths()` says (autotune.export.forced_length), so trials do equal work.
    The accuracy pass sends the trial's own `fields` alone. With `plan.screening` and
    `screen`, the screening items are answered first, as the in-process worker does, and a
    trial already under the floor stops there, before its load test.
    """
    batch = config.batch_size
    by_id = {prompt.item_id: prompt for prompt in prompts}
    ids = list(by_id)

    def phase(name: str) -> None:
        if on_phase is not None:
            on_phase(name)

    async with http_client(max(batch, plan.accuracy_batch_size)) as client:
        # One client per pass: the load test's also feeds each streamed chunk to the live
        # series its stop rule reads.
        same_server = functools.partial(
            ChatClient,
            client,
            base_url=base_url,
            model=model,
            fields=fields,
            image_max_side=config.image_max_side,
        )
        chat = same_server()
        screened: dict[str, str] = {}
        screening_s = 0.0
        if plan.screening is not None and screen is not None:
            phase("screening")
            t0 = time.perf_counter()
            replies = await closed_loop(chat.send, [by_id[i] for i in plan.screening.ids], batch)
            screened = {reply.item_id: reply.text for reply in replies}
            screening_s = time.perf_counter() - t0
            if screen(screened, plan.screening):
                now = time.perf_counter()
                return PassesResult(
                    load_start=now,
                    load_stop=now,
                    screening_s=screening_s,
                    timings=[],
                    stop_reason="screened out",
                    predictions=screened,
                    screened_out=True,
                )
        # A server batches whatever is in flight: the load runs at the trial's own
        # concurrency from its first request, and its start is the warm-up, cut where the
        # rate settles (autotune.measure.steady).
        phase("load test")
        live = LiveTokens()
        load_chat = same_server(on_chunk=live.add)
        workload = [by_id[i] for i in cycled(ids, plan.workload_requests)]
        repeats = ImageRepeats(plan.repeat_image_share, seed=plan.seed)
        lengths = plan.answer_lengths() if forced_fields is not None else None

        async def send_load(prompt: Prompt) -> Reply:
            # A fresh image, or one this trial sent before (autotune.measure.repeats), and the
            # next forced length: both drawn before the first await, so in start order.
            item_id, mark = repeats.next(prompt.item_id)
            extra = forced_fields(lengths.next()) if forced_fields and lengths else None
            return await load_chat.send(dataclasses.replace(by_id[item_id], mark=mark), extra)

        if plan.request_rate_per_s is None:
            run = await closed_loop_until(
                send_load,
                workload,
                batch,
                plan.rule(),
                live=live,
                min_warmup_requests=plan.warmup_requests,
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
        load_s = time.perf_counter() - run.start

        predictions: dict[str, str] | None = None
        accuracy_s = 0.0
        # A trial that lost its race is not a contender: its answers would decide nothing.
        if plan.accuracy_ids is not None and run.stop_reason != RACED:
            phase("accuracy")
            t0 = time.perf_counter()
            # The screening answers stand: the worker does the same (answers do not depend on
            # the batch where screening and the pass could differ, tests/test_output_neutral).
            todo = [by_id[i] for i in plan.accuracy_ids if i not in screened]
            answers = await closed_loop(chat.send, todo, plan.accuracy_batch_size)
            predictions = {**screened, **{reply.item_id: reply.text for reply in answers}}
            accuracy_s = time.perf_counter() - t0
    return PassesResult(
        warmup_s=0.0,  # no separate warm-up: it is the start of the load
        load_s=load_s,
        load_start=run.start,
        load_stop=run.stop,
        min_warmup_s=run.min_warmup_s,
        accuracy_s=accuracy_s,
        timings=[reply.timing for reply in run.replies],
        stop_reason=run.stop_reason,
        stop_rule_trail=run.trail,
        predictions=predictions or {},
        screening_s=screening_s,
        screened_out=False,
        repeated_requests=repeats.repeated,
    )
