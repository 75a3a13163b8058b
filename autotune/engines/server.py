"""Measure trials through the server command `autotune export` prints for them.

One launch is one server process: the command rendered from the launch-time parameters
(autotune.export; host 127.0.0.1, a free port), started in its own process group, polled on
GET /v1/models, and kept up for every trial that shares those parameters. Each trial sends its
own request fields (image size, decoding, max tokens, concurrency) over HTTP with
autotune.client, and the server is stopped whatever happens (failure, time-out, Ctrl-C). What
a user later pastes is the very command that was measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

from autotune.checkpoints.adapters import CANNOT_SERVE, Adapter, served_model
from autotune.client import ChatError
from autotune.engines import server_process
from autotune.engines.event_loop import run_to_end
from autotune.engines.gpus import Gpu, gpu_indices, pinned_env
from autotune.engines.identity import check_engine, engine_version, install_hint
from autotune.engines.memory import MemorySampler
from autotune.engines.passes import ForcedFields, run_passes
from autotune.engines.phases import Judge
from autotune.engines.scratch import make_scratch
from autotune.engines.server_process import (
    _PORT_TAKEN,
    HOST,
    LAUNCH_ATTEMPTS,
    Ready,
    ReadyWatch,
    ServerProcess,
    resolve_program,
)
from autotune.engines.session import (
    EstimateCallback,
    MeasurePlan,
    PhaseCallback,
    Served,
    new_launch_id,
)
from autotune.errors import AutotuneError, TrialFailure
from autotune.evalset.dataset import EvalSet
from autotune.export import Export, forced_length, render_export
from autotune.measure.cpu_load import LoadSeen, process_tree
from autotune.params import TrialConfig
from autotune.records import PassesResult, Prompt, SessionResult

Render = Callable[[TrialConfig, int | None], Export]

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


# What a server's log says when the GPU (or the host) ran out of memory.
_OOM_MARKERS = ("out of memory", "outofmemoryerror", "cuda error: out of memory")


def as_oom(failure: TrialFailure) -> TrialFailure:
    """A crash whose log says the memory ran out is an `oom` failure: the study learns from
    those (autotune.study.run.objective) instead of treating them as a broken command."""
    if failure.kind in ("crash", "request") and any(
        marker in failure.log_tail.lower() for marker in _OOM_MARKERS
    ):
        return TrialFailure(failure.reason, kind="oom", log_tail=failure.log_tail)
    return failure


def _server_env(export: Export, device: str, pinned: dict[str, str]) -> dict[str, str]:
    # PYTHONUNBUFFERED: log lines as they happen. `pinned`: the GPUs the launch was given.
    env = {**os.environ, **export.env, "PYTHONUNBUFFERED": "1", **pinned}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU space stays on the CPU on a GPU host too
    return env


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


def check_renders(render: Render, config: TrialConfig, fmt: str) -> Export:
    """The command for `config` before anything is launched; TrialFailure when it has none."""
    try:
        dry = render(config, None)
    except AutotuneError as exc:
        raise TrialFailure(str(exc), kind="unsupported") from None
    if not dry.argv:
        raise TrialFailure(f"format {fmt!r} has no server command", kind="unsupported")
    program = resolve_program(dry.argv)[0]
    if shutil.which(program) is None:
        raise TrialFailure(
            f"'{dry.argv[0]}' is not installed here; {install_hint(fmt)}", kind="unsupported"
        )
    return dry


def _served_launch(session: ServerSession, config: TrialConfig, plan: MeasurePlan) -> Served:
    """ServerSession.served: the running launch's address and `config`'s request fields."""
    server, ready, export = session.server, session.ready, session.export
    assert server is not None and ready is not None and export is not None
    return Served(
        ready.base_url,
        served_model(session.adapters, ready.models),
        dict(session.render(config, server.requested_port).request),
        load_fields(export.format, plan),
        session.prompts,
    )


class ServerSession:
    """One server launch, measured trial after trial (see the module docstring)."""

    def __init__(
        self,
        render: Render,
        *,
        launch: TrialConfig,
        fmt: str,
        device: str,
        prompts: list[Prompt],
        startup_timeout_s: float,
        trial_timeout_s: float,
        gpus: list[Gpu] | None = None,
        adapters: list[Adapter] | None = None,
        judge: Judge | None = None,
    ) -> None:
        self.render = render
        self.adapters = adapters or []
        self.gpus = gpus
        self.launch = launch
        self.fmt = fmt
        self.device = device
        self.prompts = prompts
        self.judge = judge
        self.startup_timeout_s = startup_timeout_s
        self.trial_timeout_s = trial_timeout_s
        self.launch_id, self.launch_key = new_launch_id(), launch.launch_key()
        self.startup_s = 0.0
        # Made at launch: one refused before (not installed, no command) leaves nothing behind.
        self._workdir: Path | None = None
        self.server: ServerProcess | None = None
        self.sampler: MemorySampler | None = None
        self.ready: Ready | None = None
        self.export: Export | None = None
        self.engine_actual = ""
        self._watch: ReadyWatch | None = None  # a `begin` not yet waited for

    def begin(self) -> ServerSession:
        """Start the server without waiting: a watcher times its start-up to when it first
        answers (autotune.study.run.launches.LaunchStarter); `start` waits, `close` stops it."""
        _refuse_unservable(self.render, self.launch, self.fmt, self.adapters)
        try:
            self._watch = ReadyWatch(self._spawn(attempt=1), self.startup_timeout_s)
        except BaseException:
            self.close()
            raise
        return self

    def start(self, *, on_phase: PhaseCallback | None = None) -> ServerSession:
        """Start the server (or finish `begin`) until it is ready; a lost port race retries."""
        if self._watch is None:  # `begin` refused what it could not serve already
            _refuse_unservable(self.render, self.launch, self.fmt, self.adapters)
        if on_phase is not None:
            on_phase("starting server" if self._watch is None else "waiting for the server")
        try:
            self._launch()
            assert self.server is not None and self.export is not None
            engine = check_engine(self.export.format, self.export.argv, self.server.log_text())
            if engine.fell_back:
                raise TrialFailure(
                    f"engine fallback: asked for {engine.requested}, the server runs "
                    f"{engine.actual}; the trial would record the wrong engine",
                    kind="engine_fallback",
                    log_tail=self.server.log_tail(),
                )
            self.engine_actual = engine.actual
        except TrialFailure as failure:
            self.close()
            raise as_oom(failure) from None
        except BaseException:  # Ctrl-C included: the server goes down with us
            self.close()
            raise
        return self

    def _spawn(self, *, attempt: int) -> ServerProcess:
        """Start the server command on a free port (its log: server-ATTEMPT.log)."""
        if self._workdir is None:
            self._workdir = make_scratch("autotune-server-")
        port = server_process.free_port()  # looked up here: tests replace it
        export = self.render(self.launch, port)
        server = ServerProcess(
            export.argv,
            env=_server_env(export, self.device, pinned_env(self.gpus) if self.gpus else {}),
            port=port,
            log_path=self._workdir / f"server-{attempt}.log",
        )
        self.server, self.export = server, export
        server.start()
        self.sampler = MemorySampler(
            server.pid, use_gpu=self.device != "cpu", devices=gpu_indices(self.gpus)
        ).start()
        return server

    def _launch(self) -> None:
        for attempt in range(1, LAUNCH_ATTEMPTS + 1):
            watch, self._watch = self._watch, None
            server = watch.server if watch else self._spawn(attempt=attempt)
            try:
                self.ready = watch.result() if watch else server.wait_ready(self.startup_timeout_s)
                self.startup_s = self.ready.startup_s
                return
            except TrialFailure as exc:
                taken = exc.kind == "crash" and any(
                    marker in exc.log_tail.lower() for marker in _PORT_TAKEN
                )
                self._stop_server()
                if not (taken and attempt < LAUNCH_ATTEMPTS):
                    raise

    def measure(
        self,
        config: TrialConfig,
        plan: MeasurePlan,
        *,
        on_phase: PhaseCallback | None = None,
        on_estimate: EstimateCallback | None = None,
    ) -> SessionResult:
        server, ready, export, sampler = self.server, self.ready, self.export, self.sampler
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
            "engine": self.engine_actual,
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
        return self.server is not None and self.server.process.poll() is None

    served = _served_launch

    def _stop_server(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None
        if self.server is not None:
            self.server.stop()

    def close(self) -> None:
        self._stop_server()
        if self._watch is not None:  # the server is down: its watcher ends at its next poll
            self._watch.thread.join(timeout=5.0)
            self._watch = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


def _refuse_unservable(
    render: Render, launch: TrialConfig, fmt: str, adapters: Sequence[Adapter]
) -> None:
    """Refuse a launch this server cannot run before anything starts."""
    check_renders(render, launch, fmt)
    if adapters and fmt in CANNOT_SERVE:
        raise TrialFailure(
            f"{CANNOT_SERVE[fmt]}; this launch would not serve the adapter", kind="unsupported"
        )


def _versions_and_load(load: LoadSeen) -> dict[str, str]:
    """The libraries' versions, and the load the trial's requests ran under."""
    versions = {}
    for name in ("torch", "transformers"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[f"{name}_version"] = metadata.version(name)
    return versions | load.figures()


__all__ = ["HOST", "ServerSession", "chat_prompts", "check_renders", "drive_passes", "renderer"]
