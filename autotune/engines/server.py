"""Measure trials through the server command `autotune export` prints for them.

One launch is one server process: the command rendered from the launch-time parameters
(autotune.export; host 127.0.0.1, a free port), started in its own process group, polled on
GET /v1/models, and kept up for every trial that shares those parameters. Each trial sends its
own request fields (image size, decoding, max tokens, concurrency) over HTTP with
autotune.client, and the server is stopped whatever happens (failure, time-out, Ctrl-C:
autotune.engines.server_launch). What a user later pastes is the very command that was
measured.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

import httpx

from autotune.checkpoints.adapters import Adapter, served_model
from autotune.client import ChatError
from autotune.engines.event_loop import run_to_end
from autotune.engines.identity import check_engine, engine_version
from autotune.engines.passes import ForcedFields, run_passes
from autotune.engines.phases import Judge
from autotune.engines.server_launch import Render, ServerLaunch, as_oom
from autotune.engines.server_process import HOST, resolve_program
from autotune.engines.session import (
    EstimateCallback,
    MeasurePlan,
    PhaseCallback,
    Served,
    new_launch_id,
)
from autotune.errors import TrialFailure
from autotune.evalset.dataset import EvalSet
from autotune.export import Export, forced_length, render_export
from autotune.measure.cpu_load import LoadSeen, process_tree
from autotune.params import TrialConfig
from autotune.records import PassesResult, Prompt, SessionResult

# How a server trial is timed: by the client, on the wall clock, so whatever slows the server
# down (its HTTP work, other processes on its cores) is in its figures, as for its users.
SERVER_CLOCK = "wall clock (the client times each request over HTTP)"


def chat_prompts(evalset: EvalSet) -> list[Prompt]:
    """Every item as a prompt, in the order load tests cycle (EvalSet.balanced_ids)."""
    by_id = {item.id: item for item in evalset.items}
    return [Prompt(i, by_id[i].load_image(), by_id[i].prompt) for i in evalset.balanced_ids()]


def drive_passes(
    base_url: str,
    model: str,
    *,
    prompts: list[Prompt],
    config: TrialConfig,
    fields: dict[str, Any],
    plan: MeasurePlan,
    timeout_s: float,
    on_phase: PhaseCallback | None,
    on_estimate: EstimateCallback | None = None,
    forced_fields: ForcedFields | None = None,
    answer_fields: ForcedFields | None = None,
    log_tail: Callable[[], str] = lambda: "",
    server_exited: Callable[[], bool] = lambda: False,
    judge: Judge | None = None,
    load: Callable[[], float | None] | None = None,
) -> PassesResult:
    """Run the passes under a time limit; transport errors become a TrialFailure. `load`:
    the server's wait share for a core, which racing reads."""

    async def limited() -> PassesResult:
        passes = run_passes(
            base_url,
            model,
            prompts=prompts,
            config=config,
            fields=fields,
            plan=plan,
            forced_fields=forced_fields,
            answer_fields=answer_fields,
            on_phase=on_phase,
            on_estimate=on_estimate,
            judge=judge,
            load=load,
        )
        return await asyncio.wait_for(passes, timeout=timeout_s)

    try:
        return run_to_end(limited())
    except TimeoutError:
        raise TrialFailure(
            f"timed out after {timeout_s:.0f} s of requests (trial_timeout_s)",
            kind="timeout",
            log_tail=log_tail(),
        ) from None
    except (httpx.HTTPError, ChatError) as exc:
        kind = "crash" if server_exited() else "request"
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise TrialFailure(reason, kind=kind, log_tail=log_tail()) from None


def load_fields(fmt: str | None, plan: MeasurePlan) -> ForcedFields | None:
    """How a load-test request on `fmt` asks for an answer of a given length; None when
    `plan` does not force lengths.

    A space that forces the length on a server that cannot force it is refused when it is
    loaded (autotune.space.model), so reaching this without fields is a bug.
    """
    if plan.output_tokens is None:
        return None
    if forced_length(fmt, plan.output_tokens) is None:
        raise TrialFailure(
            f"workload.output_tokens: {fmt} requests cannot force an answer length",
            kind="unsupported",
        )

    def fields(tokens: int) -> dict[str, Any]:
        return forced_length(fmt, tokens) or {}

    return fields


# The request fields that cap an answer's tokens, by server.
CAP_FIELDS = ("max_tokens", "max_completion_tokens")


def timed_fields(fmt: str, fields: dict[str, Any]) -> ForcedFields:
    """How a timed accuracy answer (autotune.accuracy.timed) asks for its length on `fmt`:
    forced as a load test's, where the server can force one; else (ms-swift) the trial's own
    cap lowered to it, which a dummy model fills, as it never stops early."""

    def answer_fields(tokens: int) -> dict[str, Any]:
        forced = forced_length(fmt, tokens)
        return forced or {key: tokens for key in CAP_FIELDS if key in fields}

    return answer_fields


def renderer(
    fmt: str,
    *,
    model: str,
    engine_args: dict[str, Any],
    geometry: dict[str, int] | None,
    adapters: Sequence[Adapter] = (),
    quantized_paths: dict[str, str] | None = None,
) -> Render:
    """render(config, port): the `fmt` command for `config`, bound to 127.0.0.1:port."""

    def render(config: TrialConfig, port: int | None) -> Export:
        return render_export(
            config,
            fmt=fmt,
            model=model,
            host=HOST,
            port=port,
            engine_args=engine_args,
            image_geometry=geometry,
            adapters=adapters,
            quantized_models=quantized_paths,
        )

    return render


class ServerSession:
    """One server launch, measured trial after trial (see the module docstring); the server
    process itself, from its start to its stop, is its ServerLaunch."""

    def __init__(
        self,
        server_launch: ServerLaunch,
        *,
        prompts: list[Prompt],
        trial_timeout_s: float,
        judge: Judge | None = None,
    ) -> None:
        self.server_launch = server_launch
        self.render, self.adapters = server_launch.render, server_launch.adapters
        self.prompts = prompts
        self.judge = judge
        self.trial_timeout_s = trial_timeout_s
        self.launch_id, self.launch_key = new_launch_id(), server_launch.launch.launch_key()
        self.startup_s = 0.0

    def begin(self) -> ServerSession:
        """Start the server without waiting (ServerLaunch.begin); `start` waits for it."""
        self.server_launch.begin()
        return self

    def start(self, *, on_phase: PhaseCallback | None = None) -> ServerSession:
        """Start the server (or finish `begin`) until it is ready (ServerLaunch.start)."""
        self.server_launch.start(on_phase=on_phase)
        self.startup_s = self.server_launch.startup_s
        return self

    def measure(
        self,
        config: TrialConfig,
        plan: MeasurePlan,
        *,
        on_phase: PhaseCallback | None = None,
        on_estimate: EstimateCallback | None = None,
    ) -> SessionResult:
        up = self.server_launch
        server, ready, export, sampler = up.server, up.ready, up.export, up.sampler
        assert server is not None and ready and export is not None and sampler is not None
        # Rendered with the port the launch asked for (a server may have moved off it).
        trial_export = self.render(config, server.requested_port)
        if trial_export.argv != export.argv or trial_export.env != export.env:
            # Only request-time values may differ between trials on one launch; anything else
            # would record a command that did not run.
            raise TrialFailure(
                "this trial's command differs from the running launch's", kind="error"
            )
        sampler.reset_window()
        load = LoadSeen(lambda: process_tree(server.pid))  # on the server's processes
        try:
            passes = drive_passes(
                ready.base_url,
                served_model(self.adapters, ready.models),
                prompts=self.prompts,
                config=config,
                fields=dict(trial_export.request),
                plan=plan,
                forced_fields=load_fields(export.format, plan),
                answer_fields=timed_fields(export.format, trial_export.request),
                timeout_s=self.trial_timeout_s,
                on_phase=on_phase,
                on_estimate=on_estimate,
                log_tail=server.log_tail,
                server_exited=lambda: server.process.poll() is not None,
                judge=self.judge,
                load=load.share,
            )
        except TrialFailure as failure:
            self.close()
            raise as_oom(failure) from None
        except BaseException:
            self.close()
            raise
        peak_mib, memory_source = sampler.window_peak()
        environment = {
            "runner": "server",
            "clock": SERVER_CLOCK,
            "device": "cuda" if memory_source.startswith("nvml") else "cpu",
            "server_format": export.format,
            "server_command": export.command,
            "server_program": resolve_program(export.argv)[0] if export.argv else "",
            "server_port": str(ready.port),
            "requested_port": str(server.requested_port),
            "server_pid": str(server.pid),
            "served_model": served_model(self.adapters, ready.models),
            "export_exact": str(trial_export.exact).lower(),
            "engine": up.engine_actual,
            "engine_requested": check_engine(export.format, export.argv, "").requested,
            "engine_fallback": "none",
            "engine_version": engine_version(export.format),
            **_versions_and_load(load),
        }
        return SessionResult(
            **dict(passes),
            peak_memory_mib=peak_mib,
            memory_source=memory_source,
            environment=environment,
        )

    def alive(self) -> bool:
        return self.server_launch.alive()

    def served(self, config: TrialConfig, plan: MeasurePlan) -> Served:
        """The running launch's address and `config`'s request fields."""
        up = self.server_launch
        server, ready, export = up.server, up.ready, up.export
        assert server is not None and ready is not None and export is not None
        return Served(
            ready.base_url,
            served_model(self.adapters, ready.models),
            dict(self.render(config, server.requested_port).request),
            load_fields(export.format, plan),
            self.prompts,
        )

    def close(self) -> None:
        self.server_launch.close()


def _versions_and_load(load: LoadSeen) -> dict[str, str]:
    """The libraries' versions, and the load the trial's requests ran under."""
    versions = {}
    for name in ("torch", "transformers"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[f"{name}_version"] = metadata.version(name)
    return versions | load.figures()


__all__ = ["HOST", "ServerSession", "chat_prompts", "drive_passes", "renderer"]
