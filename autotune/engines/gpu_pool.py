"""Disjoint GPU sets for the launches of every autotune process on this host.

Each GPU has a lock file; a launch holds the locks of the GPUs it runs on until it stops, so
no two engines ever share a device, whichever process or study started them. The kernel
releases a dead process's locks, so a worker that dies frees its GPUs without anyone cleaning
up. One allocation lock makes requests take turns: a launch that needs two GPUs keeps what it
has taken while it waits for the rest, and no single-GPU launch can slip in before it, so a
tensor-parallel trial is never starved.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from autotune.engines.gpus import Gpu
from autotune.errors import TrialFailure

POLL_S = 0.5


def lock_dir() -> Path:
    """Shared by every autotune process of this user on this host."""
    folder = Path(tempfile.gettempdir()) / f"autotune-gpus-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _try_lock(path: Path) -> IO[bytes] | None:
    handle = path.open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


class GpuLease:
    """GPUs held for one launch; `release` (or the process's end) gives them back."""

    def __init__(self, gpus: list[Gpu], handles: list[IO[bytes]], waited_s: float) -> None:
        self.gpus = gpus
        self._handles = handles
        self.waited_s = waited_s

    def release(self) -> None:
        for handle in self._handles:
            handle.close()  # closing the file drops its flock
        self._handles = []


class GpuPool:
    """The GPUs a run may use, shared through lock files with every other process."""

    def __init__(self, gpus: list[Gpu], folder: Path | None = None) -> None:
        self.gpus = gpus
        self.folder = folder or lock_dir()

    def _path(self, gpu: Gpu) -> Path:
        return self.folder / f"{gpu.uuid}.lock"

    def acquire(self, count: int, on_wait: Callable[[str], None] | None = None) -> GpuLease:
        """`count` GPUs of the pool, waiting (in turn with other processes) until they are free."""
        if count > len(self.gpus):
            raise TrialFailure(
                f"needs {count} GPUs and this run has {len(self.gpus)} "
                f"({', '.join(str(g.index) for g in self.gpus)})",
                kind="unsupported",
            )
        started = time.perf_counter()
        taken: dict[int, IO[bytes]] = {}
        told = False
        with (self.folder / "allocate.lock").open("ab") as turn:
            fcntl.flock(turn, fcntl.LOCK_EX)  # released when the with-block closes the file
            try:
                while True:
                    for gpu in self.gpus:
                        if len(taken) == count:
                            break
                        if gpu.index not in taken:
                            handle = _try_lock(self._path(gpu))
                            if handle is not None:
                                taken[gpu.index] = handle
                    if len(taken) == count:
                        break
                    if not told and on_wait is not None:
                        on_wait(f"waiting for {count - len(taken)} more GPU(s) held by other runs")
                        told = True
                    time.sleep(POLL_S)
            except BaseException:
                for handle in taken.values():
                    handle.close()
                raise
        chosen = [gpu for gpu in self.gpus if gpu.index in taken]
        return GpuLease(chosen, [taken[gpu.index] for gpu in chosen], time.perf_counter() - started)
