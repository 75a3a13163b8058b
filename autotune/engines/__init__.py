"""Engines outside the study process, each one launch measured trial after trial.

`open_session` starts the right one for a configuration: a worker process for in-process
backends (autotune.engines.inprocess), the exported server command for server backends
(autotune.engines.server), or nothing for a server someone else runs (autotune.engines.endpoint).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from autotune.accuracy.staged import look_at_answers
from autotune.checkpoints.adapters import Adapter
from autotune.engines.gpus import Gpu, pinned_env
from autotune.engines.session import (
    EngineSession,
    EstimateCallback,
    MeasurePlan,
    PendingSession,
    PhaseCallback,
    measure_plan,
)
from autotune.evalset.dataset import EvalSet
from autotune.params import SERVER_BACKENDS, TrialConfig
from autotune.space import SearchSpace

if TYPE_CHECKING:
    from autotune.engines.server import ServerSession


def session_format(config: TrialConfig, server_format: str | None = None) -> str | None:
    """The export format whose server measures `config`; None for the in-process worker."""
    if server_format is not None:
        return server_format
    return config.backend if config.backend in SERVER_BACKENDS else None


def open_session(
    space: SearchSpace,
    launch: TrialConfig,
    *,
    model_path: str,
    evalset: EvalSet,
    endpoint: str | None = None,
    server_format: str | None = None,
    image_geometry: dict[str, int] | None = None,
    on_phase: PhaseCallback | None = None,
    gpus: list[Gpu] | None = None,
    adapters: Sequence[Adapter] = (),
    quantized_paths: dict[str, str] | None = None,
) -> EngineSession:
    """Launch the engine that serves `launch` and wait until it is ready (TrialFailure if not).

    `gpus`: the devices the launch holds (autotune.engines.gpu_pool); the engine sees only
    those. None leaves it what this process sees. `adapters`: LoRA adapters to serve, the
    first one measured. `quantized_paths`: the model's checkpoints in a quantised layout, by
    weight_quant value, for engines that load one (LMDeploy's FP8).
    """
    if endpoint is not None:
        from autotune.engines.endpoint import EndpointSession
        from autotune.engines.server import chat_prompts

        return EndpointSession(
            endpoint,
            launch=launch,
            prompts=chat_prompts(evalset),
            trial_timeout_s=space.trial_timeout_s,
            adapters=list(adapters),
            judge=functools.partial(look_at_answers, evalset),
        ).start(on_phase=on_phase)
    fmt = session_format(launch, server_format)
    if fmt is not None:
        return _server_session(
            space,
            launch,
            fmt,
            model_path=model_path,
            evalset=evalset,
            image_geometry=image_geometry,
            gpus=gpus,
            adapters=adapters,
            quantized_paths=quantized_paths,
        ).start(on_phase=on_phase)
    from autotune.engines.inprocess.session import WorkerSession
    from autotune.engines.threads import choose_threads

    return WorkerSession(
        model=model_path,
        device=space.device,
        evalset=str(evalset.path),
        launch=launch,
        trial_timeout_s=space.trial_timeout_s,
        pinned=pinned_env(gpus) if gpus else None,
        adapters=list(adapters),
        threads=choose_threads(space.cpu_threads),
    ).start(on_phase=on_phase)


def begin_session(
    space: SearchSpace,
    launch: TrialConfig,
    *,
    model_path: str,
    evalset: EvalSet,
    endpoint: str | None = None,
    image_geometry: dict[str, int] | None = None,
    gpus: list[Gpu] | None = None,
    adapters: Sequence[Adapter] = (),
    quantized_paths: dict[str, str] | None = None,
    **_: object,
) -> PendingSession | None:
    """Start the server that serves `launch` without waiting for it (its `start` waits);
    None where only open_session can start the engine (an in-process worker, an endpoint).
    TrialFailure when the launch cannot even begin."""
    fmt = session_format(launch)
    if endpoint is not None or fmt is None:
        return None
    return _server_session(
        space,
        launch,
        fmt,
        model_path=model_path,
        evalset=evalset,
        image_geometry=image_geometry,
        gpus=gpus,
        adapters=adapters,
        quantized_paths=quantized_paths,
    ).begin()


def _server_session(
    space: SearchSpace,
    launch: TrialConfig,
    fmt: str,
    *,
    model_path: str,
    evalset: EvalSet,
    image_geometry: dict[str, int] | None,
    gpus: list[Gpu] | None,
    adapters: Sequence[Adapter],
    quantized_paths: dict[str, str] | None,
) -> ServerSession:
    """The server session for `launch` in format `fmt`, not yet started."""
    from autotune.engines.server import ServerSession, chat_prompts, renderer
    from autotune.engines.server_launch import ServerLaunch

    render = renderer(
        fmt,
        model=model_path,
        engine_args=space.engine_args.for_format(fmt),
        geometry=image_geometry,
        adapters=adapters,
        quantized_paths=quantized_paths,
    )
    server_launch = ServerLaunch(
        render=render,
        launch=launch,
        fmt=fmt,
        device=space.device,
        startup_timeout_s=space.workload.startup_timeout_s,
        gpus=gpus,
        adapters=list(adapters),
    )
    return ServerSession(
        server_launch,
        prompts=chat_prompts(evalset),
        trial_timeout_s=space.trial_timeout_s,
        judge=functools.partial(look_at_answers, evalset),
    )


__all__ = [
    "EngineSession",
    "EstimateCallback",
    "MeasurePlan",
    "PendingSession",
    "PhaseCallback",
    "begin_session",
    "measure_plan",
    "open_session",
    "session_format",
]
