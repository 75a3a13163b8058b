"""A built pool's record of what it holds, and the check that it still holds exactly that.

A pool is built once into studies/evalsets/<name>/ and then read by every study: an answer
edited, a line cut from items.jsonl or one image copied over another would be judged on under
the pool's name. So the build writes `build.json` last, with the SHA-256 of items.jsonl, of
each of its lines (to name the first that differs) and of each image, and every use re-hashes
the files before a study reads them. Hashing a 3,000-item pool reads every image; a check that
passed is remembered in `.verified.json` beside them, keyed by each file's size, modification
and change times and inode, so the next use only looks at the files' metadata (any write, copy
or rename changes the change time, which no tool sets back).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.evalset.paths import UnreadableFile, read_regular_file

BUILD_FILE = "build.json"
ITEMS_FILE = "items.jsonl"
CACHE_FILE = ".verified.json"
BUILD_FORMAT = 2
RECORD_MAX_BYTES = 64 * 1024 * 1024
MAX_POOL_ITEMS = 100_000
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
# (size, modification time, change time, inode): what a write, copy or rename changes.
Signature = tuple[int, int, int, int]


class PoolChanged(Exception):
    """The first way a built pool differs from its build ("items.jsonl line 17 differs")."""


class NotBuilt(Exception):
    """Why a folder holds no current build of the pool (absent, an older autotune's, built
    from other generators): building it again is the fix."""


class BuiltFile(BaseModel):
    """One file the build wrote: its size and SHA-256."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    bytes: int = Field(ge=0, description="Its size, checked before it is read.")
    sha256: Sha256 = Field(description="SHA-256 of its bytes.")


class BuildRecord(BaseModel):
    """build.json: what a build of a pool wrote, so that any later change can be named."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    format: Literal[2] = Field(description="The record's layout; an older build has none.")
    pool: str = Field(min_length=1, description="The pool's name in the pools file.")
    items: int = Field(gt=0, le=MAX_POOL_ITEMS, description="Items in items.jsonl.")
    items_sha256: Sha256 = Field(description="SHA-256 of items.jsonl: the seeds' output.")
    images_sha256: Sha256 = Field(description="One hash of every image (`images_digest`).")
    lines: list[Sha256] = Field(description="SHA-256 of each line of items.jsonl, in order.")
    files: dict[str, BuiltFile] = Field(description="items.jsonl and each image, by path.")
    rendered_with: dict[str, str] = Field(
        description="Versions of what drew the images (Pillow, FreeType, matplotlib)."
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def images_digest(files: dict[str, BuiltFile]) -> str:
    """One hash of the images: each one's path and SHA-256, in path order."""
    listed = "".join(
        f"{name}\0{entry.sha256}\n" for name, entry in sorted(files.items()) if name != ITEMS_FILE
    )
    return _sha256(listed.encode())


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")


def write_build_record(
    folder: Path, *, pool: str, images: list[str], rendered_with: dict[str, str]
) -> BuildRecord:
    """Hash what a build wrote into `folder` (items.jsonl and `images`, paths relative to it)
    and write build.json, the last file of a build."""
    items = (folder / ITEMS_FILE).read_bytes()
    files = {ITEMS_FILE: BuiltFile(bytes=len(items), sha256=_sha256(items))}
    for name in images:
        data = (folder / name).read_bytes()
        files[name] = BuiltFile(bytes=len(data), sha256=_sha256(data))
    record = BuildRecord(
        format=BUILD_FORMAT,
        pool=pool,
        items=len(_lines(items)),
        items_sha256=files[ITEMS_FILE].sha256,
        images_sha256=images_digest(files),
        lines=[_sha256(line) for line in _lines(items)],
        files=files,
        rendered_with=rendered_with,
    )
    (folder / BUILD_FILE).write_text(record.model_dump_json(indent=1) + "\n", encoding="utf-8")
    return record


def read_build_record(folder: Path) -> tuple[BuildRecord, bytes]:
    """The folder's build record and its bytes.

    Raises:
        NotBuilt: there is no folder, or an older autotune built it (no file list).
        PoolChanged: build.json is missing, unreadable or not a build record.
    """
    if not folder.is_dir():
        raise NotBuilt("it is not built yet")
    path = folder / BUILD_FILE
    try:
        data = read_regular_file(path, max_bytes=RECORD_MAX_BYTES)
    except UnreadableFile as problem:
        raise PoolChanged(f"{BUILD_FILE} {problem}") from None
    try:
        return BuildRecord.model_validate_json(data), data
    except ValidationError as exc:
        if _older_build(data):
            raise NotBuilt("an older autotune built it (its build.json lists no files)") from None
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "the record"
        raise PoolChanged(f"{BUILD_FILE} is not a build record ({where}: {error['msg']})") from None


def _older_build(data: bytes) -> bool:
    try:
        record = json.loads(data)
    except ValueError:
        return False
    return isinstance(record, dict) and set(record) == {
        "pool",
        "items",
        "items_sha256",
        "images_sha256",
    }


def _signature(path: Path) -> Signature:
    info = path.stat()
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)


class _Verified(BaseModel):
    """.verified.json: the record that passed and each file's signature when it did."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record_sha256: Sha256
    files: dict[str, Signature]


def _hash_file(folder: Path, name: str, expected: BuiltFile) -> str:
    """The SHA-256 of a file of the build; PoolChanged naming it when it is no longer the
    regular file of the size the build wrote (checked before reading: a FIFO or a device
    put in its place is named, not waited on or read)."""
    path = folder / name
    try:
        data = read_regular_file(path, max_bytes=expected.bytes)
    except UnreadableFile as problem:
        if not (path.is_file() and str(problem).startswith("is ")):
            what = "is missing" if str(problem) == "does not exist" else str(problem)
            raise PoolChanged(f"{name} {what}") from None
        data = b""  # larger than the build wrote: said below with its size
    if len(data) != expected.bytes:
        size = path.stat().st_size if path.is_file() else len(data)
        raise PoolChanged(f"{name} is {size:,} bytes, the build wrote {expected.bytes:,}")
    return _sha256(data)


def _first_changed_line(folder: Path, record: BuildRecord) -> str:
    """Where items.jsonl first differs from the lines the build wrote."""
    try:
        data = read_regular_file(folder / ITEMS_FILE, max_bytes=RECORD_MAX_BYTES)
    except UnreadableFile as problem:
        return f"{ITEMS_FILE} {problem}"
    lines = _lines(data)
    for number, (line, expected) in enumerate(zip(lines, record.lines, strict=False), start=1):
        if _sha256(line) != expected:
            return f"{ITEMS_FILE} line {number} differs from the build"
    if len(lines) != len(record.lines):
        return f"{ITEMS_FILE} has {len(lines):,} lines, the build wrote {len(record.lines):,}"
    return f"{ITEMS_FILE} differs from the build (its line ends)"


def verify_build(folder: Path, record: BuildRecord, record_bytes: bytes) -> None:
    """Re-hash every file the build wrote, unless each is as it was when a check last passed.

    Raises:
        PoolChanged: the first file (or line of items.jsonl) that differs from the build.
    """
    names = sorted(record.files)
    cached = _cached(folder, record_bytes, names)
    if cached:
        return
    for name in names:
        entry = record.files[name]
        if _outside(name):
            raise PoolChanged(f"{BUILD_FILE} lists {name!r}, outside the pool's folder")
        try:
            digest = _hash_file(folder, name, entry)
        except PoolChanged:
            if name == ITEMS_FILE:
                raise PoolChanged(_first_changed_line(folder, record)) from None
            raise
        if digest != entry.sha256:
            if name == ITEMS_FILE:
                raise PoolChanged(_first_changed_line(folder, record))
            raise PoolChanged(f"{name} differs from the build")
    if record.files[ITEMS_FILE].sha256 != record.items_sha256:
        raise PoolChanged(f"{BUILD_FILE} lists another items.jsonl than its items hash")
    if images_digest(record.files) != record.images_sha256:
        raise PoolChanged(f"{BUILD_FILE} lists other images than its images hash")
    _remember(folder, record_bytes, names)


def _outside(name: str) -> bool:
    normalised = os.path.normpath(name)
    return os.path.isabs(name) or normalised == ".." or normalised.startswith(".." + os.sep)


def _cached(folder: Path, record_bytes: bytes, names: list[str]) -> bool:
    """Whether the last check that passed saw this record and these very files."""
    try:
        data = read_regular_file(folder / CACHE_FILE, max_bytes=RECORD_MAX_BYTES)
        verified = _Verified.model_validate_json(data)
        return (
            verified.record_sha256 == _sha256(record_bytes)
            and list(verified.files) == names
            and all(_signature(folder / name) == verified.files[name] for name in names)
        )
    except (UnreadableFile, ValidationError, OSError):
        return False  # no cache, or one of another shape: hash again


def _remember(folder: Path, record_bytes: bytes, names: list[str]) -> None:
    """Write .verified.json whole or not at all; a folder that cannot take it (read-only)
    only means the next use hashes again."""
    try:
        signatures = {name: _signature(folder / name) for name in names}
        text = _Verified(record_sha256=_sha256(record_bytes), files=signatures).model_dump_json()
        descriptor, partial = tempfile.mkstemp(prefix=CACHE_FILE, dir=folder)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(partial, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
        os.replace(partial, folder / CACHE_FILE)
    except OSError:
        pass
