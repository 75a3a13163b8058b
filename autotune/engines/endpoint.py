"""Measure an OpenAI-compatible server that is already running (`--endpoint URL`).

Nothing is launched, so only what a request carries can differ between trials: the image size,
the decoding knobs, max_tokens and the concurrency. Start-up time and memory are not ours to
see, and are recorded as NaN rather than guessed.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

import httpx

from autotune.client import ChatError, PassPlan, http_client, list_models, normalize_base_url
from autotune.engines.server import chat_prompts, drive_passes
from autotune.errors import TrialFailure
from autotune.evalset.dataset import EvalSet
from autotune.export.base import sampling_request
from autotune.params import TrialConfig
from autotune.space import SearchSpace

# Greedy in every engine we know: temperature 0 (OpenAI, vLLM, ms-swift) and top_k 1 (LMDeploy,
# which has no greedy switch over HTTP). The server's kind is unknown here, so send both.
GREEDY_FIELDS: dict[str, Any] = {"temperature": 0, "top_k": 1}


def endpoint_fields(config: TrialConfig) -> dict[str, Any]:
    return sampling_request(config, greedy=dict(GREEDY_FIELDS))


def served_models(url: str) -> list[str]:
    """The endpoint's model ids; TrialFailure when it does not answer like an OpenAI server."""
    base = normalize_base_url(url)

    async def ask() -> list[str]:
        async with http_client(1) as client:
            return await list_models(client, base)

    try:
        models = asyncio.run(ask())
    except (httpx.HTTPError, ChatError) as exc:
        raise TrialFailure(
            f"endpoint {base} did not answer GET /v1/models: {exc}", kind="endpoint"
        ) from None
    if not models:
        raise TrialFailure(f"endpoint {base} serves no model", kind="endpoint")
    return models


def run_endpoint_trial(
    url: str,
    config: TrialConfig,
    *,
    space: SearchSpace,
    evalset: EvalSet,
    measure_accuracy: bool = True,
    on_phase: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The worker's `result` dict, measured through a running server at `url`."""
    base = normalize_base_url(url)
    models = served_models(base)
    plan = PassPlan(
        prompts=chat_prompts(evalset),
        config=config,
        fields=endpoint_fields(config),
        warmup_requests=space.workload.warmup_requests,
        requests=space.workload.measured_requests(config.batch_size),
        request_rate_per_s=space.workload.request_rate_per_s,
        measure_accuracy=measure_accuracy,
    )
    passes = drive_passes(base, models[0], plan, timeout_s=space.trial_timeout_s, on_phase=on_phase)
    return {
        "startup_s": math.nan,
        "compile_s": passes["compile_s"],
        "timings": passes["timings"],
        "predictions": passes["predictions"],
        "peak_memory_mib": math.nan,
        "memory_source": "unavailable (endpoint)",
        "environment": {"runner": "endpoint", "endpoint": base, "served_model": models[0]},
    }
