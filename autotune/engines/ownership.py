"""Whether a process group is still the one autotune started, before anything signals it.

A process group id is only a number: once the group is gone, the kernel may hand it to an
unrelated process that starts a session of its own. So a group is taken as ours only when

- its leader is alive and is the very process autotune started: same start time (to the
  clock tick) and same command line, both recorded when it was started; or
- its leader is gone (a server's helpers outlived it) and every process left in it carries
  the random token autotune put in the leader's environment, which its children inherit.

Groups 0 and 1 and autotune's own group are never ours to signal: os.killpg(0, ...) is the
caller's own group, and 1 is init's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

TOKEN_VARIABLE = "AUTOTUNE_GROUP_TOKEN"
# psutil's start times come from the kernel's clock ticks (1/100 s): the same process reads
# the same value; a process started later, even within the same second, reads another.
_START_TOLERANCE_S = 0.005


@dataclass(frozen=True)
class Leader:
    """What identifies a group's leader: its start time and its command line."""

    started: float
    cmdline: tuple[str, ...]


def leader_of(pgid: int) -> Leader | None:
    """The identity of the process `pgid` as it runs now (None if it is gone)."""
    try:
        process = psutil.Process(pgid)
        with process.oneshot():
            return Leader(started=process.create_time(), cmdline=tuple(process.cmdline()))
    except (psutil.Error, OSError, ValueError):
        return None


def protected(pgid: int) -> str | None:
    """Why group `pgid` may never be signalled by the repair, or None."""
    if pgid <= 1:
        return f"process group {pgid} is never signalled"
    if pgid == os.getpgrp():
        return f"process group {pgid} is autotune's own"
    return None


def members(pgid: int) -> list[psutil.Process]:
    """The live processes of group `pgid` (zombies wait for a reaper and hold nothing)."""
    found = []
    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return found


def _carries(process: psutil.Process, token: str) -> bool:
    try:
        return process.environ().get(TOKEN_VARIABLE) == token
    except (psutil.Error, OSError):
        return False  # another user's process, or gone: not provably ours


def why_not_ours(pgid: int, live: list[psutil.Process], leader: Leader, token: str) -> str | None:
    """Why the live group `pgid` is not the one started as `leader` with `token` (None if it
    is)."""
    if any(process.pid == pgid for process in live):
        now = leader_of(pgid)
        if now is None:
            return "its leader cannot be read"
        if not abs(now.started - leader.started) <= _START_TOLERANCE_S:  # NaN included
            return "its leader started at another time than the process autotune started"
        if now.cmdline != leader.cmdline:
            return "its leader runs another command than the one autotune started"
        return None
    if not token or not all(_carries(process, token) for process in live):
        return "its leader is gone and not every process in it was started by autotune"
    return None
