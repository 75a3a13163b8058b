"""A record of every process group autotune starts, so nothing a killed run left keeps running.

The guard (autotune.engines.guard) takes a command's group down when autotune dies; this is
the second line: each group is recorded in a per-user folder with the process that owns it,
and the next `autotune run` stops any group whose owner is gone, and says so.

What the registry says is only acted on when it is provably ours: the folder must be one that
autotune made (a real folder, of this user, mode 0700: anyone can create a folder of that name
in a shared temporary folder first); a group is signalled only while it is still the group
autotune started (autotune.engines.ownership), and a scratch folder removed only when it is
provably the one autotune made (autotune.engines.scratch). Each entry skipped is said in one
line; the run goes on.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import stat
import tempfile
import time
from pathlib import Path
from typing import Annotated

import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.engines.ownership import Leader, leader_of, members, protected, why_not_ours
from autotune.engines.scratch import remove_scratch, scratch_token

# An entry is a few hundred bytes; a larger file was not written by record().
_ENTRY_MAX_BYTES = 64 * 1024
# Process ids are C ints (pid_t); a number outside it is no process.
Pid = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
_OWNER_TOLERANCE_S = 1.0


def registry_folder() -> Path:
    return Path(tempfile.gettempdir()) / f"autotune-processes-{os.getuid()}"


class UnsafeRegistry(Exception):
    """The registry folder is not provably autotune's: it is neither read nor written."""


class _Record(BaseModel):
    # Strict: a registry entry is written by record() alone, so a string where a number
    # belongs means someone else wrote it.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, allow_inf_nan=False)


class _Owner(_Record):
    pid: Pid
    started: float


class _Leader(_Record):
    started: float
    cmdline: list[str]


class _Scratch(_Record):
    path: str
    token: str = Field(min_length=1)


class Entry(_Record):
    """One started group: who started it, and what identifies it while it lives."""

    pgid: Pid
    owner: _Owner
    command: list[str] = []
    # Absent in entries written before autotune recorded them: such a group is never
    # signalled, its folder never removed.
    leader: _Leader | None = None
    token: str = ""
    scratch: _Scratch | None = None


def _open_registry(*, create: bool) -> int | None:
    """A descriptor of the registry folder once it is checked to be ours (None when there is
    none and `create` is False)."""
    folder = registry_folder()
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
            os.chmod(folder, 0o700)  # whatever the umask took away
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeRegistry(f"{folder} is a symlink or a file, not a folder") from None
        raise UnsafeRegistry(f"{folder} cannot be opened ({exc.strerror})") from None
    info = os.fstat(descriptor)
    why = None
    if info.st_uid != os.getuid():
        why = f"it belongs to user id {info.st_uid}, not to you"
    elif stat.S_IMODE(info.st_mode) != 0o700:
        why = f"its mode is {stat.S_IMODE(info.st_mode):04o}, not 0700"
    if why is not None:
        os.close(descriptor)
        raise UnsafeRegistry(f"{folder}: {why}")
    return descriptor


def _owner() -> dict[str, float]:
    me = psutil.Process()
    return {"pid": me.pid, "started": me.create_time()}


def _settled_leader(pgid: int, wait_s: float = 2.0) -> Leader | None:
    """The leader's identity once its command line is readable: for a moment after exec the
    kernel shows an empty one (seen on busy cores), and an entry recorded then would never
    match its own group again, which the repair would then leave running."""
    deadline = time.monotonic() + wait_s
    leader = leader_of(pgid)
    while leader is not None and not leader.cmdline and time.monotonic() < deadline:
        time.sleep(0.01)
        leader = leader_of(pgid)
    return leader


def record(pgid: int, argv: list[str], log_path: Path | None = None, *, token: str = "") -> None:
    """Note that this process started group `pgid` (its leader running now), logging to
    `log_path`, with `token` in its environment (best effort: a full disk or an unsafe
    registry folder is no reason to fail a trial; the next run's repair says the latter)."""
    leader = _settled_leader(pgid)
    if leader is None or protected(pgid) is not None:
        return  # already gone: nothing to stop later
    entry: dict[str, object] = {
        "pgid": pgid,
        "owner": _owner(),
        "command": argv[:3],
        "leader": {"started": leader.started, "cmdline": list(leader.cmdline)},
        "token": token,
    }
    if log_path is not None and (marker := scratch_token(log_path.parent)) is not None:
        entry["scratch"] = {"path": str(log_path.parent), "token": marker}
    with contextlib.suppress(OSError, UnsafeRegistry):
        descriptor = _open_registry(create=True)
        if descriptor is None:
            return
        try:
            _write(descriptor, f"{pgid}.json", json.dumps(entry).encode())
        finally:
            os.close(descriptor)


def _write(folder: int, name: str, data: bytes) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=folder)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(name, flags, 0o600, dir_fd=folder), "wb") as handle:
        handle.write(data)


def _unlink(folder: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=folder)


def forget(pgid: int) -> None:
    with contextlib.suppress(OSError, UnsafeRegistry):
        descriptor = _open_registry(create=False)
        if descriptor is not None:
            _unlink(descriptor, f"{pgid}.json")
            os.close(descriptor)


def _read_entry(folder: int, name: str) -> Entry | str:
    """The entry in file `name`, or why it cannot be taken as one."""
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError as exc:
        return f"it cannot be opened ({exc.strerror})"
    try:
        info = os.fstat(descriptor)  # before reading: a folder or a FIFO is no entry
        if not stat.S_ISREG(info.st_mode):
            return "it is not a regular file"
        if info.st_uid != os.getuid():
            return f"it belongs to user id {info.st_uid}"
        if info.st_size > _ENTRY_MAX_BYTES:
            return f"it is larger than {_ENTRY_MAX_BYTES} bytes"
        data = os.read(descriptor, _ENTRY_MAX_BYTES + 1)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    finally:
        os.close(descriptor)
    try:
        entry = Entry.model_validate(json.loads(data))
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "the entry"
            return f"{field}: {first['msg']}"
        return "it is not valid JSON"
    if name != f"{entry.pgid}.json":
        return f"it names process group {entry.pgid}, not the one of its file name"
    return entry


def _owner_alive(owner: _Owner) -> bool:
    try:
        started = psutil.Process(owner.pid).create_time()
    except (psutil.Error, OSError, ValueError, OverflowError):
        return False
    return abs(started - owner.started) <= _OWNER_TOLERANCE_S


def _printable(text: str, limit: int = 120) -> str:
    text = text[:limit]
    return text if text.isprintable() and text.isascii() else ascii(text)


def _repair(folder: int, name: str) -> list[str]:
    """Act on one entry whose owner is gone; the lines saying what was done or skipped."""
    entry = _read_entry(folder, name)
    if isinstance(entry, str):
        _unlink(folder, name)
        return [f"skipped the process registry entry {_printable(name)}: {entry}"]
    if _owner_alive(entry.owner):
        return []  # a run in progress (this one, or another) still owns it
    command = _printable(" ".join(entry.command))
    why = protected(entry.pgid)
    live = [] if why is not None else members(entry.pgid)
    if why is None and live:
        if entry.leader is None:
            why = "it was recorded without its leader's start time and command"
        else:
            leader = Leader(started=entry.leader.started, cmdline=tuple(entry.leader.cmdline))
            why = why_not_ours(entry.pgid, live, leader, entry.token)
    _unlink(folder, name)
    if why is not None:
        return [
            f"skipped the process registry entry {_printable(name)} (process group "
            f"{entry.pgid}, {command}): {why}; nothing signalled, nothing removed"
        ]
    lines = []
    if live:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(entry.pgid, signal.SIGKILL)
        lines.append(
            f"stopped process group {entry.pgid} ({command}) left running by an earlier run "
            f"(pid {entry.owner.pid}) that did not stop it"
        )
    if entry.scratch is not None:
        left = remove_scratch(entry.scratch.path, entry.scratch.token)
        if left is not None:
            lines.append(f"process registry entry {_printable(name)}: {_printable(left, 400)}")
    return lines


def clean_up() -> list[str]:
    """Stop the recorded groups whose owner is gone and remove their scratch folders, when
    provably ours; one line for each group stopped and each entry skipped."""
    try:
        descriptor = _open_registry(create=False)
    except UnsafeRegistry as exc:
        return [
            f"did not use the process registry {exc}; nothing signalled, nothing removed "
            "(remove it: autotune makes its own)"
        ]
    if descriptor is None:
        return []
    try:
        lines = []
        for name in sorted(os.listdir(descriptor)):
            if name.endswith(".json"):
                lines.extend(_repair(descriptor, name))
        return lines
    finally:
        os.close(descriptor)
