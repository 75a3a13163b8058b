"""One server launch: started, waited for until it answers, and stopped with all it left.

The command is rendered for a free port and started in its own process group
(autotune.engines.server_process), its memory sampled from then on. A server that lost the
race for its port is started again on another; one whose log says it runs another engine
than the one asked for fails the launch (a trial would record the wrong engine); a crash whose
log says the memory ran out is an `oom` failure. `close` stops the server and its sampler and
removes its work folder, whatever happened before.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autotune.checkpoints.adapters import CANNOT_SERVE, Adapter
from autotune.engines import server_process
from autotune.engines.gpus import Gpu, gpu_indices, pinned_env
from autotune.engines.identity import check_engine, install_hint
from autotune.engines.memory import MemorySampler
from autotune.engines.scratch import make_scratch
from autotune.engines.server_process import (
    _PORT_TAKEN,
    LAUNCH_ATTEMPTS,
    Ready,
    ReadyWatch,
    ServerProcess,
    resolve_program,
)
from autotune.engines.session import PhaseCallback
from autotune.errors import AutotuneError, TrialFailure
from autotune.export import Export
from autotune.params import TrialConfig

Render = Callable[[TrialConfig, int | None], Export]

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


def _refuse_unservable(
    render: Render, launch: TrialConfig, fmt: str, adapters: Sequence[Adapter]
) -> None:
    """Refuse a launch this server cannot run before anything starts."""
    check_renders(render, launch, fmt)
    if adapters and fmt in CANNOT_SERVE:
        raise TrialFailure(
            f"{CANNOT_SERVE[fmt]}; this launch would not serve the adapter", kind="unsupported"
        )


@dataclass(kw_only=True, eq=False)
class ServerLaunch:
    """The server process of one launch, from its start to its stop (see the module
    docstring): `launch` rendered by `render` in format `fmt`, on `device` and `gpus`.
    `server`, `ready`, `export` and `sampler` are set once it has started."""

    render: Render
    launch: TrialConfig
    fmt: str
    device: str
    startup_timeout_s: float
    gpus: list[Gpu] | None = None
    adapters: list[Adapter] = field(default_factory=list)
    startup_s: float = field(default=0.0, init=False)
    server: ServerProcess | None = field(default=None, init=False)
    sampler: MemorySampler | None = field(default=None, init=False)
    ready: Ready | None = field(default=None, init=False)
    export: Export | None = field(default=None, init=False)
    engine_actual: str = field(default="", init=False)
    # Made at launch: one refused before (not installed, no command) leaves nothing behind.
    _workdir: Path | None = field(default=None, init=False)
    _watch: ReadyWatch | None = field(default=None, init=False)  # a `begin` not yet waited for

    def begin(self) -> None:
        """Start the server without waiting: a watcher times its start-up to when it first
        answers (autotune.study.run.launches.LaunchStarter); `start` waits, `close` stops it."""
        _refuse_unservable(self.render, self.launch, self.fmt, self.adapters)
        try:
            self._watch = ReadyWatch(self._spawn(attempt=1), self.startup_timeout_s)
        except BaseException:
            self.close()
            raise

    def start(self, *, on_phase: PhaseCallback | None = None) -> None:
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

    def alive(self) -> bool:
        return self.server is not None and self.server.process.poll() is None

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
