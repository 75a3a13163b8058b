"""What a trial leaves beside its study: the spool's files, and the trial's artifacts.

A spool folder in a shared temporary folder can be made by anyone first: another user who
made `autotune-spool-<uid>/` (mode 0777) could drop a forged `trial-N.json` there, and the next
run would record it as a measurement, and `best` recommend it. So, as for the process registry
(autotune.engines.leftovers), a spool folder is created private (0700) and used only while it
is a real folder of this user that nobody else can write; otherwise one line says why, and
nothing in it is read or written. A file in it is read only when it is a regular file of this
user under a size bound (a FIFO would block, /dev/zero or a huge file exhaust memory), opened
without following a symlink and checked on its descriptor before a byte is read.

A trial's artifacts, the sample outputs (prompt, answer, reference, score) of every item, are
stored with Optuna's artifact API in a folder beside the study (ArtifactRecorder), so
optuna-dashboard shows them on each trial and `autotune report` can put answers next to the
numbers.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import hashlib
import io
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact

from autotune.accuracy.scoring import AccuracyReport
from autotune.engines.measurement import Measurement
from autotune.evalset.dataset import EvalSet
from autotune.records.stored import TrialRecord
from autotune.records.writer import write_trial
from autotune.study.store.storage_urls import STUDIES_DIR, artifact_dir, local_file

SAMPLE_OUTPUTS = "sample_outputs.json"
SAMPLE_OUTPUTS_TABLE = "sample_outputs.jsonl"
ACCURACY_TABLE = "accuracy_by_category.csv"
LOG_TAIL = "log_tail.txt"


def _category_csv(report: AccuracyReport) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["category", "accuracy"])
    writer.writerows([name, f"{value:.4f}"] for name, value in report.by_category.items())
    writer.writerow(["all", f"{report.accuracy:.4f}"])
    return buffer.getvalue()


class ArtifactRecorder:
    def __init__(self, storage_url: str, study_name: str) -> None:
        self.base = artifact_dir(storage_url, study_name)

    def store(self) -> FileSystemArtifactStore:
        self.base.mkdir(parents=True, exist_ok=True)
        return FileSystemArtifactStore(self.base)

    def _upload(self, trial: optuna.Trial, name: str, text: str, mimetype: str) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_text(text, encoding="utf-8")
            return upload_artifact(
                artifact_store=self.store(),
                file_path=str(path),
                study_or_trial=trial,
                mimetype=mimetype,
                encoding="utf-8",
            )

    def log_tail(self, trial: optuna.Trial, text: str) -> None:
        """A failed trial's server or worker log tail, as a file on its dashboard page."""
        if not text:
            return
        # Best effort: the reason and the tail are user attributes too, and the failure itself
        # must not be masked by a full disk.
        with contextlib.suppress(OSError):
            self._upload(trial, LOG_TAIL, text, "text/plain")

    def sample_outputs(self, trial: optuna.Trial, evalset: EvalSet, m: Measurement) -> None:
        if m.accuracy is None:
            return
        rows = []
        for item in evalset.items:
            if item.id not in m.accuracy.item_scores:
                continue
            rows.append(
                {
                    "id": item.id,
                    "category": item.category,
                    "prompt": item.prompt,
                    "answer": m.predictions.get(item.id),
                    "references": item.answers,
                    "metric": item.metric,
                    "score": m.accuracy.item_scores[item.id],
                    "passed": m.accuracy.item_passed[item.id],
                }
            )
        # Best effort: the answers and scores are user attributes too; a full disk here must
        # not fail a trial that was measured (the storage's own writes decide that).
        try:
            artifact_id = self._upload(
                trial,
                SAMPLE_OUTPUTS,
                json.dumps(rows, indent=1, ensure_ascii=False),
                "application/json",
            )
            # The same rows as JSONL and the per-category scores as CSV: optuna-dashboard
            # shows .jsonl and .csv artifacts as tables on the trial's page.
            self._upload(
                trial,
                SAMPLE_OUTPUTS_TABLE,
                "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                "application/jsonl",
            )
            self._upload(trial, ACCURACY_TABLE, _category_csv(m.accuracy), "text/csv")
        except OSError:
            return
        write_trial(trial, TrialRecord.part(sample_outputs_artifact=artifact_id))


# A spooled trial is a few kilobytes (predictions included, far less than this); a larger
# file was not written by Spool.write.
SPOOL_FILE_MAX_BYTES = 16 * 1024 * 1024
# The name of a failure note in the spool: failed-<number>.json.
FAILED = "failed"
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


class UnsafeSpool(Exception):
    """A spool folder that is not provably this user's: neither read nor written."""


def _checked(descriptor: int, shown: Path) -> int:
    """`descriptor` (an open folder) once it is a folder of ours nobody else can write."""
    info = os.fstat(descriptor)
    why = None
    if not stat.S_ISDIR(info.st_mode):
        why = "it is not a folder (remove it)"
    elif info.st_uid != os.getuid():
        why = f"it belongs to user id {info.st_uid}, not to you (remove it)"
    elif stat.S_IMODE(info.st_mode) & (stat.S_IWGRP | stat.S_IWOTH):
        why = (
            f"its mode is {stat.S_IMODE(info.st_mode):04o}: others can write to it (chmod 700 "
            "it, or remove it)"
        )
    if why is None:
        return descriptor
    os.close(descriptor)
    raise UnsafeSpool(f"the spool folder {shown} is not used: {why}")


def _open_folder(name: str | Path, shown: Path, *, parent: int | None, create: bool) -> int | None:
    """A descriptor of folder `name` (inside `parent`'s descriptor when given) once checked;
    None when it does not exist and `create` is False."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent)
            os.chmod(name, 0o700, dir_fd=parent)  # whatever the umask took away
    try:
        descriptor = os.open(name, _FOLDER_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeSpool(
                f"the spool folder {shown} is not used: it is a symlink or a file, not a folder"
            ) from None
        raise
    return _checked(descriptor, shown)


def open_spool_folder(folder: Path, *, private_parent: bool, create: bool) -> int | None:
    """A descriptor of the spool folder `folder`, checked (and its parent too when
    `private_parent`: the per-user folder in the temporary folder, which anyone could make
    first). None when it does not exist and `create` is False; UnsafeSpool when not ours;
    OSError when it cannot be made."""
    if not private_parent:
        if create:
            folder.parent.mkdir(parents=True, exist_ok=True)
        return _open_folder(folder, folder, parent=None, create=create)
    parent = _open_folder(folder.parent, folder.parent, parent=None, create=create)
    if parent is None:
        return None
    try:
        return _open_folder(folder.name, folder, parent=parent, create=create)
    finally:
        os.close(parent)


def read_spool_file(folder: int, name: str) -> str:
    """The text of spool file `name` in the folder open as `folder`; ValueError saying why
    when it is no file autotune wrote (not regular, another user's, too large, not UTF-8)."""
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("it is a symlink, not a regular file") from None
        raise
    try:
        info = os.fstat(descriptor)  # before reading: a FIFO or a device is no spool file
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("it is not a regular file (a FIFO, a device or a folder)")
        if info.st_uid != os.getuid():
            raise ValueError(f"it belongs to user id {info.st_uid}, not to you")
        if info.st_size > SPOOL_FILE_MAX_BYTES:
            raise ValueError(
                f"it is {info.st_size} bytes, more than a spool file's "
                f"{SPOOL_FILE_MAX_BYTES // (1024 * 1024)} MiB"
            )
        chunks, left = [], SPOOL_FILE_MAX_BYTES + 1
        while left > 0 and (chunk := os.read(descriptor, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(descriptor)
    data = b"".join(chunks)
    if len(data) > SPOOL_FILE_MAX_BYTES:
        raise ValueError(f"it grew past {SPOOL_FILE_MAX_BYTES // (1024 * 1024)} MiB as it was read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("it is not UTF-8 text") from None


def _write_file(folder: int, name: str, data: bytes) -> None:
    """Write `name` whole or not at all: a private partial file, then renamed over it."""
    partial = f"{name}.partial"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial, dir_fd=folder)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        with os.fdopen(os.open(partial, flags, 0o600, dir_fd=folder), "wb") as handle:
            handle.write(data)
        os.replace(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(partial, dir_fd=folder)
        raise


class Spool:
    """Measured trials not yet known to be recorded, one JSON file per trial (and, for a
    trial that failed when the storage refused its end, a note of why)."""

    def __init__(self, storage_url: str, study_name: str) -> None:
        stored = local_file(storage_url)
        beside = stored.parent if stored is not None else STUDIES_DIR
        key = hashlib.sha256(f"{storage_url}\0{study_name}".encode()).hexdigest()[:12]
        self.folders = [
            beside / f"{study_name}-spool",
            Path(tempfile.gettempdir()) / f"autotune-spool-{os.getuid()}" / f"{study_name}-{key}",
        ]

    def _open(self, index: int, *, create: bool) -> int | None:
        return open_spool_folder(self.folders[index], private_parent=index == 1, create=create)

    def _each_open(self) -> list[tuple[Path, int]]:
        """(folder, descriptor) of each spool folder that exists and is ours; the caller
        closes them. A folder not ours is skipped (refused() says so)."""
        opened = []
        for index, folder in enumerate(self.folders):
            with contextlib.suppress(OSError, UnsafeSpool):
                descriptor = self._open(index, create=False)
                if descriptor is not None:
                    opened.append((folder, descriptor))
        return opened

    def refused(self) -> list[str]:
        """One line for each spool folder that exists but is not provably ours."""
        lines = []
        for index in range(len(self.folders)):
            try:
                descriptor = self._open(index, create=False)
            except UnsafeSpool as exc:
                lines.append(str(exc))
                continue
            except OSError:
                continue
            if descriptor is not None:
                os.close(descriptor)
        return lines

    def write(self, number: int, payload: dict[str, Any], *, prefix: str = "trial") -> Path | None:
        """Keep a trial's results; the path, or None when no folder can take them."""
        data = json.dumps(payload).encode("utf-8")
        for index, folder in enumerate(self.folders):
            name = f"{prefix}-{number}.json"
            try:
                descriptor = self._open(index, create=True)
            except (OSError, UnsafeSpool):
                continue
            if descriptor is None:
                continue
            try:
                _write_file(descriptor, name, data)
                return folder / name
            except OSError:
                continue
            finally:
                os.close(descriptor)
        return None

    def note_failure(self, trial: optuna.Trial, kind: str, reason: str) -> None:
        """Why `trial` ended, for the next run to record (the storage refused it now)."""
        started = trial.datetime_start
        note = {"number": trial.number, "kind": kind, "reason": reason}
        if started is not None:
            note["started"] = started.isoformat()
        self.write(trial.number, note, prefix=FAILED)

    def where(self, number: int) -> Path | None:
        name = f"trial-{number}.json"
        found = None
        for folder, descriptor in self._each_open():
            with contextlib.suppress(OSError):
                if found is None and stat.S_ISREG(
                    os.stat(name, dir_fd=descriptor, follow_symlinks=False).st_mode
                ):
                    found = folder / name
            os.close(descriptor)
        return found

    def remove(self, number: int) -> None:
        self.discard(f"trial-{number}.json")

    def discard(self, name: str) -> None:
        """Remove the file `name` from each spool folder of ours."""
        for _, descriptor in self._each_open():
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=descriptor)
            os.close(descriptor)

    def pending(self, prefix: str = "trial") -> list[Path]:
        """The spooled files (of measured trials; FAILED: the failure notes) in the folders
        that are ours."""
        found = []
        for folder, descriptor in self._each_open():
            with contextlib.suppress(OSError):
                names = os.listdir(descriptor)
                found += [
                    folder / name
                    for name in sorted(names)
                    if name.startswith(f"{prefix}-") and name.endswith(".json")
                ]
            os.close(descriptor)
        return found

    def read(self, path: Path) -> str:
        """The text of the spooled file `path` (one pending() listed); ValueError saying why
        it is no spool file, UnsafeSpool when its folder is not ours (any more)."""
        index = self.folders.index(path.parent)
        descriptor = self._open(index, create=False)
        if descriptor is None:
            raise FileNotFoundError(errno.ENOENT, "its folder is gone", str(path))
        try:
            return read_spool_file(descriptor, path.name)
        finally:
            os.close(descriptor)
