"""Run a command so that it dies with the autotune process that started it.

    python -m autotune.engines.guard COMMAND [ARGS...]

A server or worker that outlives a killed `autotune run` keeps its port and its GPU memory,
re-parented to init. Linux's parent-death signal (prctl PR_SET_PDEATHSIG) fixes that for one
process, but servers start children of their own. So every command autotune launches runs
under this small guard: the guard asks the kernel for SIGUSR1 when its parent dies, starts the
command in its own process group (which autotune made a new session), and on that signal
kills the whole group, itself included. Otherwise it only waits and passes on the exit status.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from types import FrameType

from autotune import variables

# The launching process names itself here (autotune.engines.process).
GUARD_PARENT_ENV = "AUTOTUNE_GUARD_PARENT"

PR_SET_PDEATHSIG = 1


def parent_death_signal(signum: int) -> None:
    """Ask the kernel for `signum` when this process's parent dies (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _die_with_parent(parent: int) -> None:
    parent_death_signal(signal.SIGUSR1)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.killpg(os.getpgrp(), signal.SIGKILL)


def _child_dies_with_guard() -> None:
    """In the command's process, before it starts: SIGKILL when the guard itself dies."""
    parent_death_signal(signal.SIGKILL)


def _kill_group(signum: int, frame: FrameType | None) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m autotune.engines.guard COMMAND [ARGS...]", file=sys.stderr)
        return 2
    # Killing "our group" must never reach whoever started us: lead a group of our own first
    # (autotune starts us in a new session already; someone running this by hand may not).
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)
    signal.signal(signal.SIGUSR1, _kill_group)
    # The launching process names itself, so a parent that died before this line is noticed.
    _die_with_parent(variables.read(GUARD_PARENT_ENV) or os.getppid())
    os.environ.pop(GUARD_PARENT_ENV, None)
    # A stop from autotune signals the whole group: the command gets its SIGTERM directly and
    # shuts down; the guard only waits for it. A handler, not SIG_IGN: an ignored signal
    # would stay ignored in the command too, a handler is reset when it starts.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        child = subprocess.Popen(argv, preexec_fn=_child_dies_with_guard)
    except OSError as exc:
        print(f"cannot start {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    code = child.wait()
    if code < 0:  # died from a signal: die from the same one, so the parent sees it
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # these two take no handler
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
