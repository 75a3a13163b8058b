"""Scratch folders that autotune can later prove it made, so that it removes nothing else.

A launch keeps its logs in a scratch folder of the temporary folder. When the run that made it
is killed, the next run's repair (autotune.engines.leftovers) removes it; the registry entry
that names it is only data, so the folder is removed only when its real path lies inside the
temporary folder, it is ours (our user, not a symlink) and it holds the marker written when it
was made, whose random token the entry recorded. A folder someone else made, one outside the
temporary folder or one reached through a symlink is left alone, and the repair says so.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

MARKER = ".autotune-scratch"
# Large enough for the token; a marker file longer than this was not written by us.
_MARKER_MAX_BYTES = 256


def make_scratch(prefix: str) -> Path:
    """A new private folder in the temporary folder, marked as autotune's."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))  # mode 0700, ours
    descriptor = os.open(folder / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as marker:
        marker.write(secrets.token_hex(16))
    return folder


def _read_no_follow(path: Path, limit: int) -> str | None:
    """The text of a regular file of ours at `path` (no symlink followed), or None."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(descriptor)  # before reading: a folder or a FIFO is no marker
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_size > limit:
            return None
        return os.read(descriptor, limit).decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(descriptor)


def scratch_token(folder: Path) -> str | None:
    """The marker token of a scratch folder made by make_scratch (None if it has none)."""
    return _read_no_follow(folder / MARKER, _MARKER_MAX_BYTES)


def _why_not_ours(real: Path, token: str) -> str | None:
    """Why the folder at real path `real` may not be removed, or None when it is provably
    the scratch folder made with `token`."""
    temp = Path(os.path.realpath(tempfile.gettempdir()))
    if real == temp or not real.is_relative_to(temp):
        return f"it lies outside the temporary folder {temp}"
    try:
        info = os.lstat(real)
    except OSError:
        return "it cannot be read"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid != os.getuid():
        return f"it belongs to user id {info.st_uid}"
    if scratch_token(real) != token:
        return f"it has no autotune marker ({MARKER}) of this entry"
    return None


def remove_scratch(folder: str, token: str) -> str | None:
    """Remove the scratch folder `folder` if it is provably ours; otherwise one line saying
    why it was left in place (None when removed or already gone)."""
    try:
        real = Path(os.path.realpath(folder))
        if not os.path.lexists(folder) and not os.path.lexists(real):
            return None  # gone already (or never made)
    except ValueError:  # a NUL byte: no folder has that name
        return f"left {folder!r} alone: it is not a valid path"
    why = _why_not_ours(real, token)
    if why is not None:
        return f"left the folder {folder} in place: {why}"
    shutil.rmtree(real, ignore_errors=True)  # rmtree follows no symlink inside it
    return None
