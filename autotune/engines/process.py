"""A child process in its own process group that is always stopped, whole, when we are done.

Engines and servers spawn helpers of their own (compile workers, tokenizer pools, API workers);
signalling the process group reaches all of them, so nothing outlives a trial or a Ctrl-C. A
killed autotune cannot signal anything, so each command runs under autotune.engines.guard,
which kills the group when its parent dies; and each group is recorded
(autotune.engines.leftovers) so that the next run stops anything that still escaped.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from types import TracebackType

from autotune.engines.guard import GUARD_PARENT_ENV
from autotune.engines.leftovers import forget, record
from autotune.engines.ownership import TOKEN_VARIABLE, protected


class ManagedProcess:
    """Start a command in a new session; `stop()` sends SIGTERM, then SIGKILL after a grace."""

    def __init__(
        self,
        argv: list[str],
        *,
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        capture_stdout: bool = False,
        capture_stdin: bool = False,
    ) -> None:
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.capture_stdout = capture_stdout
        self.capture_stdin = capture_stdin
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w", encoding="utf-8")
        env = dict(self.env if self.env is not None else os.environ)
        env[GUARD_PARENT_ENV] = str(os.getpid())
        # Inherited by every process of the group: proof, for a later repair, that a group
        # whose leader is gone is still the one started here.
        token = env[TOKEN_VARIABLE] = secrets.token_hex(16)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autotune.engines.guard", *self.argv],
                stdin=subprocess.PIPE if self.capture_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.capture_stdout else log,
                stderr=log,
                env=env,
                cwd=self.cwd,
                text=True,
                start_new_session=True,  # its own group: our Ctrl-C does not reach it directly
            )
        finally:
            log.close()  # the child holds its own copy of the descriptor
        record(self.proc.pid, self.argv, self.log_path, token=token)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the whole process group; safe to call more than once."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        if self.proc.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace_s)
        # Helpers of an exited leader can still be alive in the group: always finish them off.
        _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        forget(pgid)
        for stream in (self.proc.stdout, self.proc.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            with self.log_path.open(encoding="utf-8", errors="replace") as handle:
                return "".join(deque(handle, maxlen=lines))
        except OSError:
            return ""

    def __enter__(self) -> ManagedProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    if protected(pgid) is not None:  # 0 is our own group, 1 init's: never a child's
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists (for tests and for leak checks)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_group_gone(pgid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        time.sleep(0.05)
    return not group_alive(pgid)
