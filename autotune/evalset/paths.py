"""What a path given for a file is, in words, when it is not a regular file to read; and a
reader of small files that never waits on a FIFO nor reads a device.

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


class UnreadableFile(ValueError):
    """Why a file cannot be read as the small regular file it should be (the message is the
    reason alone: "is not a regular file but a FIFO (a named pipe)", "is 3 GB, ...")."""


def read_regular_file(path: Path, *, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`, read without waiting or filling
    memory: opened with O_NONBLOCK and checked on the open descriptor before reading, so a
    FIFO swapped in after a look at the path is not waited on, and /dev/zero is never read.

    Raises:
        UnreadableFile: the reason, to follow the file's name in a message.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise UnreadableFile(not_a_regular_file(path) or "cannot be opened") from None
    except ValueError:  # a NUL byte in the name
        raise UnreadableFile("is not a valid path") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "a folder")
            if stat.S_ISDIR(info.st_mode):
                raise UnreadableFile("is a folder, not a file")
            raise UnreadableFile(f"is not a regular file but {kind}")
        if info.st_size > max_bytes:
            raise UnreadableFile(f"is {info.st_size:,} bytes, more than the {max_bytes:,} allowed")
        chunks, left = [], max_bytes + 1
        while left > 0 and (chunk := os.read(descriptor, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise UnreadableFile(f"cannot be read: {exc.strerror}") from None
    finally:
        os.close(descriptor)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise UnreadableFile(f"grew past {max_bytes:,} bytes as it was read")
    return data
