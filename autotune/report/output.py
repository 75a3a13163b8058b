"""Writing a file the user named (`--out`): only ever a regular file, replaced whole.

A report is written to a temporary file beside the target and renamed over it, so a reader
never sees half of one. A rename replaces whatever has the name: run as root, `--out
/dev/full` turned the device into a 4.8 MB HTML file (issue 30). So the target is checked
before the work and again just before the rename: it must be a regular file or nothing yet.
A symlink is followed to its target, which is then checked the same way.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from autotune.errors import AutotuneError

_KINDS = {
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def output_target(out: str | Path, what: str) -> Path:
    """The real path `out` names, checked to be a regular file or none yet (one
    AutotuneError line otherwise); `what` names the file in the message ("report")."""
    path = Path(os.path.realpath(out))
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise AutotuneError(f"cannot write {what} to {out}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise AutotuneError(
            f"cannot write {what} to {out}: it is {kind}, not a regular file; give a file path"
        )
    return path


def write_text_atomically(out: str | Path, text: str, what: str) -> None:
    """Write `text` to `out` (to its target, for a symlink) through a temporary file and a
    rename."""
    path = output_target(out, what)
    temporary: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A fresh name (O_EXCL): a file or link someone placed beside the target is not used.
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o666 & ~_umask())
        output_target(path, what)  # still a regular file, or nothing, just before the rename
        os.replace(temporary, path)
        temporary = None
    except OSError as exc:
        raise AutotuneError(f"cannot write {what} to {out}: {exc.strerror or exc}") from None
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
