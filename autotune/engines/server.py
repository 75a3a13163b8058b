"""Measure a trial through the server command `autotune export` prints for it.

The command is rendered by autotune.export (host 127.0.0.1, a free port), started in its own
process group, polled on GET /v1/models, measured over HTTP by autotune.client, and stopped
whatever happens (failure, time-out, Ctrl-C). What a user later pastes is what was measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import psutil

from autotune.client import ChatError, ChatPrompt, PassPlan, run_passes
from autotune.engines.identity import (
    bound_port_from_log,
    check_engine,
    engine_version,
    install_hint,
)
from autotune.engines.memory import MemorySampler, tree_pids
from autotune.engines.process import ManagedProcess
from autotune.errors import AutotuneError, TrialFailure
from autotune.evalset.dataset import EvalSet
from autotune.export import Export, render_export
from autotune.params import TrialConfig
from autotune.space import SearchSpace

PhaseCallback = Callable[[str], None]
Render = Callable[[int], Export]

HOST = "127.0.0.1"
# vLLM and LMDeploy exit when their port was taken between our pick and their bind (ms-swift
# moves on by itself); a fresh port is then worth another launch.
_PORT_TAKEN = ("address already in use", "errno 98")
LAUNCH_ATTEMPTS = 3


def free_port() -> int:
    """A port nobody listens on right now (the server may still lose a race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def resolve_program(argv: list[str]) -> list[str]:
    """Run `swift`/`vllm`/`lmdeploy` from this interpreter's environment when it has them.

    The engine version recorded with the trial is read from this environment, so the command
    must come from it too; a bare name elsewhere on PATH could be another installation.
    """
    local = Path(sys.executable).parent / argv[0]
    if os.sep not in argv[0] and local.is_file() and os.access(local, os.X_OK):
        return [str(local), *argv[1:]]
    return list(argv)


@dataclass(frozen=True)
class Ready:
    port: int
    base_url: str
    models: list[str]
    startup_s: float


class ServerProcess:
    """A server command in its own process group, ready once GET /v1/models answers."""

    def __init__(self, argv: list[str], *, env: dict[str, str], port: int, log_path: Path):
        self.requested_port = port
        self.process = ManagedProcess(resolve_program(argv), log_path=log_path, env=env)
        self.launched_at = 0.0
        self._log_port: int | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self) -> ServerProcess:
        self.launched_at = time.perf_counter()
        try:
            self.process.start()
        except OSError as exc:  # no such program, not executable: a failed trial, not a crash
            raise TrialFailure(
                f"cannot start {self.process.argv[0]}: {exc.strerror or exc}", kind="crash"
            ) from None
        return self

    def stop(self) -> None:
        self.process.stop()

    def log_tail(self, lines: int = 40) -> str:
        return self.process.log_tail(lines)

    def log_text(self) -> str:
        try:
            return self.process.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def _candidate_ports(self) -> list[int]:
        """Ports worth probing: ours only, never a stranger's server on the requested port."""
        if self._log_port is None:
            self._log_port = bound_port_from_log(self.log_text())
        listening = _listening_ports(tree_pids(self.pid))
        wanted = [p for p in (self._log_port, self.requested_port) if p is not None]
        if listening is None:  # the OS hides sockets from us: trust the log, then the request
            return wanted[:1]
        found = [p for p in wanted if p in listening]
        # A server that moved without saying so, listening on a single port: that is the one.
        if not found and len(listening) == 1:
            found = sorted(listening)
        return list(dict.fromkeys(found))

    def wait_ready(self, timeout_s: float) -> Ready:
        """Poll until /v1/models answers; TrialFailure (with the log tail) on exit or time-out."""
        deadline = self.launched_at + timeout_s
        with httpx.Client(timeout=2.0, trust_env=False) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise TrialFailure(
                        f"server exited with status {code} before answering GET /v1/models",
                        kind="crash",
                        log_tail=self.log_tail(),
                    )
                for port in self._candidate_ports():
                    models = _probe(client, port)
                    if models is not None:
                        return Ready(
                            port=port,
                            base_url=f"http://{HOST}:{port}",
                            models=models,
                            startup_s=time.perf_counter() - self.launched_at,
                        )
                if time.perf_counter() > deadline:
                    raise TrialFailure(
                        f"server did not answer GET /v1/models within {timeout_s:.0f} s "
                        "(startup_timeout_s); stopped it",
                        kind="timeout",
                        log_tail=self.log_tail(),
                    )
                time.sleep(0.25)


def _listening_ports(pids: set[int]) -> set[int] | None:
    ports: set[int] = set()
    for pid in pids:
        try:
            process = psutil.Process(pid)
            # psutil >= 6 names it net_connections; older releases only have connections.
            lister = getattr(process, "net_connections", None) or process.connections
            connections = lister(kind="inet")
        except psutil.AccessDenied:
            return None
        except psutil.Error:
            continue
        ports.update(c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN)
    return ports


def _probe(client: httpx.Client, port: int) -> list[str] | None:
    try:
        response = client.get(f"http://{HOST}:{port}/v1/models")
        if response.status_code != 200:
            return None
        return [str(entry["id"]) for entry in response.json()["data"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def chat_prompts(evalset: EvalSet) -> list[ChatPrompt]:
    return [ChatPrompt(item.id, item.load_image(), item.prompt) for item in evalset.items]


def drive_passes(
    base_url: str,
    model: str,
    plan: PassPlan,
    *,
    timeout_s: float,
    on_phase: PhaseCallback | None,
    log_tail: Callable[[], str] = lambda: "",
    server_exited: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """Run the passes under a time limit; transport errors become a TrialFailure."""

    async def limited() -> dict[str, Any]:
        return await asyncio.wait_for(
            run_passes(base_url, model, plan, on_phase=on_phase), timeout=timeout_s
        )

    try:
        return asyncio.run(limited())
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


def _server_env(export: Export, device: str) -> dict[str, str]:
    env = {**os.environ, **export.env, "PYTHONUNBUFFERED": "1"}  # log lines as they happen
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU space stays on the CPU on a GPU host too
    return env


def _launch(
    render: Render, *, device: str, startup_timeout_s: float, workdir: Path
) -> tuple[ServerProcess, MemorySampler, Ready, Export]:
    """Start the server until it is ready; a lost port race gets a fresh port and a retry."""
    for attempt in range(1, LAUNCH_ATTEMPTS + 1):
        port = free_port()
        export = render(port)
        server = ServerProcess(
            export.argv,
            env=_server_env(export, device),
            port=port,
            log_path=workdir / f"server-{attempt}.log",
        )
        sampler: MemorySampler | None = None
        try:
            server.start()
            sampler = MemorySampler(server.pid, use_gpu=device != "cpu").start()
            return server, sampler, server.wait_ready(startup_timeout_s), export
        except BaseException as exc:  # Ctrl-C included: the server goes down with us
            if sampler is not None:
                sampler.stop()
            server.stop()
            taken = (
                isinstance(exc, TrialFailure)
                and exc.kind == "crash"
                and any(marker in exc.log_tail.lower() for marker in _PORT_TAKEN)
            )
            if not (taken and attempt < LAUNCH_ATTEMPTS):
                raise
    raise AssertionError("unreachable")


def measure_command(
    render: Render,
    *,
    config: TrialConfig,
    prompts: list[ChatPrompt],
    space: SearchSpace,
    measure_accuracy: bool = True,
    on_phase: PhaseCallback | None = None,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """Launch `render(port)`, measure it, stop it; the worker's `result` dict."""
    workload = space.workload
    workdir = Path(tempfile.mkdtemp(prefix="autotune-server-", dir=log_dir))
    try:
        if on_phase is not None:
            on_phase("starting server")
        server, sampler, ready, export = _launch(
            render,
            device=space.device,
            startup_timeout_s=workload.startup_timeout_s,
            workdir=workdir,
        )
        try:
            engine = check_engine(export.format, export.argv, server.log_text())
            if engine.fell_back:
                raise TrialFailure(
                    f"engine fallback: asked for {engine.requested}, the server runs "
                    f"{engine.actual}; the trial would record the wrong engine",
                    kind="engine_fallback",
                    log_tail=server.log_tail(),
                )
            plan = PassPlan(
                prompts=prompts,
                config=config,
                fields=dict(export.request),
                warmup_requests=workload.warmup_requests,
                requests=workload.measured_requests(config.batch_size),
                request_rate_per_s=workload.request_rate_per_s,
                measure_accuracy=measure_accuracy,
            )
            passes = drive_passes(
                ready.base_url,
                ready.models[0],
                plan,
                timeout_s=space.trial_timeout_s,
                on_phase=on_phase,
                log_tail=server.log_tail,
                server_exited=lambda: server.process.poll() is not None,
            )
        finally:
            peak_mib, memory_source = sampler.stop()
            server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    environment = {
        "runner": "server",
        "device": "cuda" if memory_source.startswith("nvml") else "cpu",
        "server_format": export.format,
        "server_command": export.command,
        "server_program": resolve_program(export.argv)[0] if export.argv else "",
        "server_port": str(ready.port),
        "requested_port": str(server.requested_port),
        "served_model": ready.models[0],
        "export_exact": str(export.exact).lower(),
        "engine": engine.actual,
        "engine_requested": engine.requested,
        "engine_fallback": "none",
        "engine_version": engine_version(export.format),
        **_library_versions(),
    }
    return {
        "startup_s": ready.startup_s,
        "compile_s": passes["compile_s"],
        "timings": passes["timings"],
        "predictions": passes["predictions"],
        "peak_memory_mib": peak_mib,
        "memory_source": memory_source,
        "environment": environment,
    }


def _library_versions() -> dict[str, str]:
    versions = {}
    for name in ("torch", "transformers"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[f"{name}_version"] = metadata.version(name)
    return versions


def run_server_trial(
    config: TrialConfig,
    *,
    space: SearchSpace,
    model_path: str,
    evalset: EvalSet,
    fmt: str | None = None,
    measure_accuracy: bool = True,
    on_phase: PhaseCallback | None = None,
) -> dict[str, Any]:
    """Measure `config` through the `fmt` export (default: its own backend's command)."""
    target = fmt or config.backend
    # The space's extra flags for this engine (engine_args), as `autotune export` adds them.
    extra = space.engine_args.for_format(target)

    def render(port: int) -> Export:
        return render_export(
            config, fmt=target, model=model_path, host=HOST, port=port, engine_args=extra
        )

    # Render once before launching anything: a target that cannot serve this configuration
    # (or a document-only format) fails the trial, not the study.
    try:
        dry = render_export(config, fmt=target, model=model_path, host=HOST, engine_args=extra)
    except AutotuneError as exc:
        raise TrialFailure(str(exc), kind="unsupported") from None
    if not dry.argv:
        raise TrialFailure(f"format {target!r} has no server command", kind="unsupported")
    program = resolve_program(dry.argv)[0]
    if shutil.which(program) is None:
        raise TrialFailure(
            f"'{dry.argv[0]}' is not installed here; {install_hint(target)}", kind="unsupported"
        )
    return measure_command(
        render,
        config=config,
        prompts=chat_prompts(evalset),
        space=space,
        measure_accuracy=measure_accuracy,
        on_phase=on_phase,
    )
