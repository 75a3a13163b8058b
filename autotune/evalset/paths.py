"""What a path given for a file is, in words, when it is not a regular file to read.

A FIFO or /dev/stdin would be waited on forever, a symbolic link loop or a dangling link is
not "not found": each is named for what it is, so the fix is plain.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = {
    stat.S_IFIFO: "a FIFO (a named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def not_a_regular_file(path: Path) -> str | None:
    """Why `path` cannot be read as a file ("is not a regular file but a FIFO (a named
    pipe)", "is a symbolic link loop", "does not exist", ...), or None for a regular file
    (after symbolic links)."""
    try:
        mode = path.stat().st_mode  # follows symbolic links
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop"
        if path.is_symlink():
            return f"is a symbolic link to {os.readlink(path)}, which does not exist"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "does not exist"
        return f"cannot be read: {exc.strerror}"
    except ValueError:  # a NUL byte: no file can have that name
        return "is not a valid path"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    kind = _KINDS.get(stat.S_IFMT(mode), "something else")
    if str(path).startswith(("/dev/std", "/dev/fd/", "/proc/self/fd/")):
        kind += " (standard input or output, which autotune does not read a file from)"
    return f"is not a regular file but {kind}"
