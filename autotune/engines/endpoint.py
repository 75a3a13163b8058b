"""Measure an OpenAI-compatible server that is already running (`--endpoint URL`).

Nothing is launched, so only what a request carries can differ between trials: the image size,
the decoding knobs, max_tokens and the concurrency. Start-up time and memory are not ours to
see, and are recorded as NaN rather than guessed.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx

from autotune.checkpoints.adapters import Adapter, served_model
from autotune.client import ChatError, http_client, list_models, normalize_base_url
from autotune.engines.phases import Judge
from autotune.engines.server import SERVER_CLOCK, drive_passes, load_fields
from autotune.engines.session import (
    EstimateCallback,
    MeasurePlan,
    PhaseCallback,
    Served,
    new_launch_id,
)
from autotune.errors import TrialFailure
from autotune.export.base import sampling_request
from autotune.params import TrialConfig
from autotune.records import Prompt, SessionResult

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


class EndpointSession:
    """A server someone else runs: every trial is a request-time setting on it."""

    def __init__(
        self,
        url: str,
        *,
        launch: TrialConfig,
        prompts: list[Prompt],
        trial_timeout_s: float,
        adapters: list[Adapter] | None = None,
        judge: Judge | None = None,
    ) -> None:
        self.base = normalize_base_url(url)
        self.judge = judge
        self.adapters = adapters or []
        self.launch_id = new_launch_id()
        self.launch_key = launch.launch_key()
        self.startup_s = math.nan
        self.prompts = prompts
        self.trial_timeout_s = trial_timeout_s

    def start(self, *, on_phase: PhaseCallback | None = None) -> EndpointSession:
        models = served_models(self.base)  # fail here, before any trial, if nothing answers
        missing = [adapter.name for adapter in self.adapters if adapter.name not in models]
        if missing:
            raise TrialFailure(
                f"the endpoint serves no model named {missing[0]!r} (it serves "
                f"{', '.join(models)}); start it with the adapter, or drop --adapter",
                kind="unsupported",
            )
        return self

    def measure(
        self,
        config: TrialConfig,
        plan: MeasurePlan,
        *,
        on_phase: PhaseCallback | None = None,
        on_estimate: EstimateCallback | None = None,
    ) -> SessionResult:
        model = served_model(self.adapters, served_models(self.base))
        passes = drive_passes(
            self.base,
            model,
            prompts=self.prompts,
            config=config,
            fields=endpoint_fields(config),
            plan=plan,
            forced_fields=load_fields(None, plan),
            timeout_s=self.trial_timeout_s,
            on_phase=on_phase,
            on_estimate=on_estimate,
            judge=self.judge,
        )
        return SessionResult(
            **dict(passes),
            peak_memory_mib=math.nan,
            memory_source="unavailable (endpoint)",
            environment={
                "runner": "endpoint",
                "clock": SERVER_CLOCK,
                "endpoint": self.base,
                "served_model": model,
            },
        )

    def alive(self) -> bool:
        return True

    def served(self, config: TrialConfig, plan: MeasurePlan) -> Served:
        model = served_model(self.adapters, served_models(self.base))
        forced = load_fields(None, plan)
        return Served(self.base, model, endpoint_fields(config), forced, self.prompts)

    def close(self) -> None:
        pass
