"""Answers kept across studies: a configuration's answers on a set are paid for once.

Greedy answers depend on the model's weights, the evaluation set, the output-affecting
parameters (autotune.params.TrialConfig.output_key) and the engine that computed them. An
entry is keyed by all four (the weights and the set by their content, the engine by its
versions), so a second study of the same model on the same set finds the reference's answers,
and any candidate whose key matches finds its own.

Entries are files in one folder (beside the study's storage, studies/answers/ by default),
each written whole to a temporary file and renamed over the entry, so a process killed
mid-write leaves the old entry or none. An entry is trusted only once its stored key equals
the key asked for, its answers are a mapping of this set's items to text and its checksum
matches them: anything else (a damaged file, one copied from another key) is refused by name
and its answers computed again.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.evalset.dataset import EvalSet

ENTRY_SCHEMA = 1
FOLDER = "answers"
_MODEL_DIGESTS = "model-digests.json"


@functools.cache
def file_sha256(path: Path, mtime_ns: int, size: int) -> str:
    """A file's SHA-256, read once per process while it stays as it was (its size and
    modification time are part of the key)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _stat_sha256(path: Path) -> str:
    stat = path.stat()
    return file_sha256(path, stat.st_mtime_ns, stat.st_size)


def digest_files(named: Mapping[str, Path]) -> str:
    """One hash of the files, each under its name (a path relative to its folder: the same
    files copied elsewhere hash the same)."""
    hashed = hashlib.sha256()
    for name, path in named.items():
        hashed.update(name.encode() + b"\0" + bytes.fromhex(_stat_sha256(path)))
    return hashed.hexdigest()[:16]


def evalset_digest(evalset: EvalSet) -> dict[str, str]:
    """The set's name and a hash of its items file and of its images (in item order)."""
    return {
        "name": evalset.name,
        "items": digest_files({"items": evalset.path}),
        "images": digest_files({item.image: item.image_path for item in evalset.items}),
    }


def _write_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, flush it to disk and rename it over
    `path`: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def model_digest(model_path: str | Path, folder: Path) -> str | None:
    """A hash of every file of a local checkpoint (a folder or one file); None when
    `model_path` is no local path (an endpoint's model name).

    Each file is hashed once: its hash is kept in `folder` by path, size and modification
    time, so the next study of a 4 GB checkpoint reads a few stat() calls, not the weights.
    """
    root = Path(model_path)
    if not root.exists():
        return None
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    memo_path = folder / _MODEL_DIGESTS
    try:
        memo = json.loads(memo_path.read_text(encoding="utf-8"))
        memo = memo if isinstance(memo, dict) else {}
    except (OSError, ValueError):
        memo = {}
    hashed = hashlib.sha256()
    changed = False
    for path in files:
        real = path.resolve()
        stat = real.stat()
        seen = memo.get(str(real))
        stamp = [stat.st_size, stat.st_mtime_ns]
        if not (isinstance(seen, dict) and seen.get("stamp") == stamp):
            seen = {"stamp": stamp, "sha256": file_sha256(real, stat.st_mtime_ns, stat.st_size)}
            memo[str(real)] = seen
            changed = True
        name = path.relative_to(root).as_posix() if root.is_dir() else root.name
        hashed.update(name.encode() + b"\0" + str(seen["sha256"]).encode() + b"\n")
    if changed:
        with contextlib.suppress(OSError):  # a read-only folder: hashed again next time
            _write_atomically(memo_path, json.dumps(memo, sort_keys=True))
    return hashed.hexdigest()[:16]


@dataclass(frozen=True)
class AnswersKey:
    """What a configuration's answers depend on; `id` names its entry."""

    model: str  # model_digest of the checkpoint the engine loads
    evalset: dict[str, str]  # evalset_digest
    output: dict[str, Any]  # TrialConfig.output_key()
    engine: dict[str, str]  # the versions of the engine and of what it runs on

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "evalset": self.evalset,
            "output": self.output,
            "engine": self.engine,
        }

    @property
    def id(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:20]


def _checksum(key: dict[str, Any], answers: dict[str, str]) -> str:
    text = json.dumps({"key": key, "answers": answers}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Cached:
    """What an entry gave: its answers (empty when none or refused) and, for a refused
    entry, why."""

    answers: dict[str, str]
    refused: str | None = None


class AnswersCache:
    """The entries of one folder, read and written whole."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, key: AnswersKey) -> Path:
        return self.folder / f"{key.id}.json"

    def read(self, key: AnswersKey, evalset: EvalSet) -> Cached:
        """The entry's answers, once its key, shape and checksum hold."""
        path = self.path(key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Cached({})
        except OSError as exc:
            return Cached({}, refused=f"{path}: unreadable ({exc.strerror})")
        problem = _entry_problem(text, key, {item.id for item in evalset.items})
        if problem is not None:
            return Cached({}, refused=f"{path}: {problem}")
        return Cached(dict(json.loads(text)["answers"]))

    def write(self, key: AnswersKey, answers: Mapping[str, str]) -> None:
        """Store `answers` with those the entry holds (an entry only grows); a refused entry
        is replaced."""
        path = self.path(key)
        kept: dict[str, str] = {}
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            text = path.read_text(encoding="utf-8")
            if _entry_problem(text, key, None) is None:
                kept = dict(json.loads(text)["answers"])
        merged = {**kept, **answers}
        if kept and merged == kept:
            return
        entry = {
            "schema": ENTRY_SCHEMA,
            "key": key.to_dict(),
            "answers": merged,
            "checksum": _checksum(key.to_dict(), merged),
        }
        # A cache saves time and holds nothing the study needs: a full disk or an unwritable
        # folder costs the next study its answers, never this trial its measurement.
        with contextlib.suppress(OSError):
            _write_atomically(path, json.dumps(entry, sort_keys=True, ensure_ascii=False))

    @contextlib.contextmanager
    def locked(self, key: AnswersKey) -> Iterator[None]:
        """Hold the entry's lock: processes that would compute the same answers take turns,
        and the second finds the first's in the entry."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f".{key.id}.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _entry_problem(text: str, key: AnswersKey, items: set[str] | None) -> str | None:
    """Why an entry's text cannot be trusted for `key` (on `items`, when given), or None."""
    try:
        entry = json.loads(text)
    except ValueError:
        return "not JSON (a damaged entry)"
    if not isinstance(entry, dict) or entry.get("schema") != ENTRY_SCHEMA:
        return f"not an answers entry of schema {ENTRY_SCHEMA}"
    stored = entry.get("key")
    if stored != key.to_dict():
        parts = key.to_dict()
        differ = [p for p in parts if not isinstance(stored, dict) or stored.get(p) != parts[p]]
        return f"its key names another {' and '.join(differ) or 'key'} than this one"
    answers = entry.get("answers")
    if not isinstance(answers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in answers.items()
    ):
        return "its answers are not a mapping of item ids to text"
    if items is not None and not set(answers) <= items:
        return f"it answers {len(set(answers) - items)} items this set does not hold"
    if entry.get("checksum") != _checksum(stored, answers):
        return "its checksum does not match its answers (a damaged or edited entry)"
    return None
