"""The journal file several workers share: never left torn, and read line by line.

Optuna's journal is one JSON record per line, appended under a lock. A write the disk refuses
half-way leaves the start of a record without its newline; Optuna's reader skips it, but the
next append is glued to it, and from then on no reader gets past that line. So a record is
written whole or not at all (the file is cut back to its old size when the write fails), and
a torn tail left by a killed process or an older autotune is cut off when a run opens the
journal (under the same lock), saying so; a command that only reads says it and leaves the
file as it is. A line that is no Optuna record (an edit, damage) is refused in one line that
names the file and the line, instead of Optuna's traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optuna.exceptions import OptunaError
from optuna.storages.journal import JournalFileBackend

from autotune.errors import StudyError
from autotune.records.shape import MAX_DEPTH
from autotune.study.store.optuna_private import journal_file, journal_lock

# How much of the file is read at a time while looking back for the last newline.
_TAIL_CHUNK = 1 << 20


class WholeRecordJournal(JournalFileBackend):
    """Optuna's journal file, appended a whole record at a time, and read a line at a time: a
    line that is no Optuna record is refused in one line that names it (the module's rule).
    `applying`: the line and record last handed to Optuna's replay, until the read is over;
    when the replay fails on it, `refused` says so (the storage asks, autotune.study.store.
    storage.GuardedJournalStorage)."""

    applying: tuple[int, Any] | None = None

    def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
        lines = iter(super().read_logs(log_number_from))
        line = log_number_from  # the lines before it were applied
        while True:
            try:
                log = next(lines)
            except StopIteration:
                self.applying = None
                return
            except ValueError as exc:  # a line that is not JSON, with more lines after it
                raise self.refusal(line + 1, f"not JSON: {exc}") from None
            except RecursionError:  # JSON nested past what Python's reader takes
                why = f"JSON nested past the {MAX_DEPTH} levels a stored attribute may hold"
                raise self.refusal(line + 1, why) from None
            line += 1
            if isinstance(log, dict) and not isinstance(log.get("study_name", ""), str):
                # The one field Optuna's replay keeps without looking at it.
                raise self.refusal(line, "study_name: not text")
            self.applying = (line, log)
            yield log

    def refused(self, exc: BaseException, worker_id: str) -> StudyError | None:
        """The refusal of the line Optuna's replay failed on with `exc`; None when `exc` came
        from elsewhere, or is Optuna's answer to this process's own write (`worker_id`'s)."""
        applying, self.applying = self.applying, None
        if applying is None or isinstance(exc, StudyError):
            return None
        line, log = applying
        own = isinstance(log, dict) and log.get("worker_id") == worker_id
        if own and isinstance(exc, (OptunaError, KeyError)):
            return None
        return self.refusal(line, _named(exc))

    def refusal(self, line: int, why: str) -> StudyError:
        return StudyError(
            f"journal {journal_file(self)}: line {line} is not an Optuna record the study can "
            f"take ({why:.200}); the file was edited or damaged: restore it from a copy, or "
            "remove that line"
        )

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n"
        data = text.encode("utf-8")
        with journal_lock(self):
            fd = os.open(journal_file(self), os.O_WRONLY | os.O_APPEND)
            try:
                size = os.fstat(fd).st_size
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                except OSError:
                    # Cutting back frees space, so it works on a full disk too.
                    os.ftruncate(fd, size)
                    raise
            finally:
                os.close(fd)


def torn_tail(path: Path) -> int:
    """How many bytes at the end of the journal are not a whole line (0: none), however long
    that tail is: read back a chunk at a time to the last newline (an edit or a writer that
    died in a large record can leave megabytes after it; cutting less would leave the next
    append glued to the torn line)."""
    with path.open("rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        end = size
        while end > 0:
            start = max(0, end - _TAIL_CHUNK)
            handle.seek(start)
            newline = handle.read(end - start).rfind(b"\n")
            if newline >= 0:
                return size - (start + newline + 1)
            end = start
    return size


def repair_tail(backend: JournalFileBackend) -> str | None:
    """Cut a torn last record off (a run is about to append); a note saying so, or None."""
    path = Path(journal_file(backend))
    with journal_lock(backend):
        torn = torn_tail(path)
        if not torn:
            return None
        size = path.stat().st_size
        os.truncate(path, size - torn)
    return (
        f"journal {path}: removed its last record, cut off after {torn} byte(s) when it was "
        "written (a full disk or a killed process); the trial it belonged to is repaired below"
    )


def tail_note(path: Path) -> str | None:
    """For a command that only reads: a torn last record is ignored, and said to be."""
    torn = torn_tail(path)
    if not torn:
        return None
    return (
        f"journal {path}: its last record was cut off after {torn} byte(s) when it was "
        "written (a full disk or a killed process) and is ignored; the next `autotune run` "
        "removes it"
    )


def _named(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
