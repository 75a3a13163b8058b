"""A server command as a child process: started in its own group, ready once it answers.

The command is whatever autotune.export renders (host 127.0.0.1, a free port); readiness is
GET /v1/models answering on the port the server really bound, which may not be the one asked
for (ms-swift moves on silently when a port is busy).
"""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from autotune.engines.identity import bound_port_from_log
from autotune.engines.memory import tree_pids
from autotune.engines.process import ManagedProcess
from autotune.errors import TrialFailure

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


# The line a Python server's traceback ends with: 'ImportError: FlashAttention2 has been ...'.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception)): (.+)$")


def exception_line(log: str, most: int = 300) -> str | None:
    """The last exception a server's log reports, as 'Name: message' (cut at `most`
    characters), or None: a server that exits before it answers says why there (a missing
    package such as flash_attn, a bad flag), and its exit status alone says nothing."""
    for line in reversed(log.splitlines()):
        found = _EXCEPTION_LINE.match(line.strip())
        if found:
            text = f"{found.group(1)}: {found.group(2)}"
            return text if len(text) <= most else text[: most - 3] + "..."
    return None


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
                    tail = self.log_tail()
                    cause = exception_line(tail)
                    raise TrialFailure(
                        f"server exited with status {code} before answering GET /v1/models"
                        + (f": {cause}" if cause else ""),
                        kind="crash",
                        log_tail=tail,
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


class ReadyWatch:
    """`ServerProcess.wait_ready` on a daemon thread, so a server comes up (and its start-up
    is timed to the moment it answers) while the caller does other work; `result` waits for
    it. Stopping the server ends the watch at its next poll (an exit is a crash)."""

    def __init__(self, server: ServerProcess, timeout_s: float) -> None:
        self.server = server
        self._ready: Ready | None = None
        self._error: BaseException | None = None
        self.thread = threading.Thread(
            target=self._wait, args=(server, timeout_s), name="server-ready", daemon=True
        )
        self.thread.start()

    def _wait(self, server: ServerProcess, timeout_s: float) -> None:
        try:
            self._ready = server.wait_ready(timeout_s)
        except BaseException as exc:  # handed to the caller of result()
            self._error = exc

    def result(self) -> Ready:
        """Its Ready, once the server answered (or the watch's time-out passed)."""
        self.thread.join()
        if self._error is not None:
            raise self._error
        assert self._ready is not None
        return self._ready


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
