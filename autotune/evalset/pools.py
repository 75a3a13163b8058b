"""Evaluation pools: sets too large to commit, built once from fixed seeds into studies/.

The sequential accuracy floor needs a thousand items or more to tell a drop of 0.02 from none
(`autotune evalset needs`). A pool (evalsets/pools.json, or the file $AUTOTUNE_POOLS_FILE names)
is a bundled set followed by more items of the same kinds from the project's own generators
(tools/make_pool.py), which draw with the fonts shipped in evalsets/fonts/, so any machine
builds it, with no system fonts and no network. The first use builds it into
studies/evalsets/<name>/ (or $AUTOTUNE_POOLS_DIR), checked against the items hash committed in
the pools file; every use re-hashes what the build wrote (autotune.evalset.integrity), so a
study is never judged on a pool changed after its build. A changed pool is refused, not
rebuilt: the change may be someone's on purpose, and it should be seen rather than undone; a
pool built by an older autotune or from older generators is rebuilt.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from autotune import variables
from autotune.errors import EvalsetError
from autotune.evalset.integrity import (
    MAX_POOL_ITEMS,
    NotBuilt,
    PoolChanged,
    Sha256,
    read_build_record,
    verify_build,
)
from autotune.evalset.paths import UnreadableFile, not_a_regular_file, read_regular_file

REPO_ROOT = Path(__file__).resolve().parents[2]
POOLS_FILE = REPO_ROOT / "evalsets" / "pools.json"
POOLS_DIR = REPO_ROOT / "studies" / "evalsets"
POOLS_FILE_ENV = "AUTOTUNE_POOLS_FILE"
POOLS_DIR_ENV = "AUTOTUNE_POOLS_DIR"
POOLS_FILE_MAX_BYTES = 1024 * 1024
# A pool's name is its folder's: never a path, never hidden (a build in progress is a hidden
# folder beside it, so it can never be taken for a pool).
POOL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
PoolName = Annotated[str, StringConstraints(pattern=POOL_NAME)]
BUILD_PREFIX = "make_pool: "  # the builder's error lines; its other lines are progress


class PoolEntry(BaseModel):
    """One pool of the pools file."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    base: PoolName = Field(description="The bundled set it starts with (evalsets/<base>/).")
    items: int = Field(gt=0, le=MAX_POOL_ITEMS, description="Items in all, the base set's too.")
    items_sha256: Sha256 = Field(
        description="SHA-256 of the built items.jsonl: the seeds' output, on every machine."
    )
    images_sha256: Sha256 | None = Field(
        default=None,
        description="Hash of the images as the shipped fonts drew them on the machine that "
        "recorded it; a build that draws otherwise (another Pillow or matplotlib) says so.",
    )


_POOLS = TypeAdapter(dict[PoolName, PoolEntry])


def pools_file() -> Path:
    return Path(variables.read(POOLS_FILE_ENV) or POOLS_FILE)


def pools_dir() -> Path:
    return Path(variables.read(POOLS_DIR_ENV) or POOLS_DIR)


def _fix(path: Path) -> str:
    if path == POOLS_FILE:
        return f"restore it with git checkout -- {POOLS_FILE.relative_to(REPO_ROOT)}"
    return f"fix it, or unset {POOLS_FILE_ENV}"


def _problem(exc: ValidationError) -> str:
    """What is wrong with a pools file, in words, from pydantic's first error."""
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    if error["type"] == "json_invalid":
        return f"is not valid JSON ({error['msg'].removeprefix('Invalid JSON: ')})"
    if not loc:
        return "is not an object of pools (pool name: base, items and items_sha256)"
    if loc[-1] == "[key]":
        return f"names a pool {loc[0]!r}: a name is a folder's, of letters, digits, '.', '_', '-'"
    if len(loc) == 1:
        return f"pool {loc[0]}: is not an object with base, items and items_sha256"
    return f"pool {loc[0]}: {'.'.join(loc[1:])}: {error['msg']}"


def read_pools(path: Path | None = None) -> dict[str, PoolEntry]:
    """The pools of a pools file (default: `pools_file()`); none where the repository's own
    is absent (an installation without evalsets/).

    Raises:
        EvalsetError: one line naming the file and what is wrong with it.
    """
    path = path or pools_file()
    if path == POOLS_FILE and not os.path.lexists(path):
        return {}
    try:
        data = read_regular_file(path, max_bytes=POOLS_FILE_MAX_BYTES)
    except UnreadableFile as problem:
        raise EvalsetError(f"pools file {path} {problem}; {_fix(path)}") from None
    try:
        return _POOLS.validate_json(data)
    except ValidationError as exc:
        raise EvalsetError(f"pools file {path} {_problem(exc)}; {_fix(path)}") from None


def known_pools() -> dict[str, dict[str, object]]:
    """Each pool of the pools file as a mapping (base, items, items_sha256, images_sha256)."""
    return {name: entry.model_dump() for name, entry in read_pools().items()}


def check_pool(name: str, folder: Path, entry: PoolEntry) -> None:
    """Return when `folder` holds this pool as built; NotBuilt when it must be built.

    Raises:
        EvalsetError: the pool was changed after its build.
    """
    try:
        record, record_bytes = read_build_record(folder)
        if record.pool != name or record.items_sha256 != entry.items_sha256:
            raise NotBuilt("it was built from other generators than the pools file's hash")
        verify_build(folder, record, record_bytes)
    except PoolChanged as change:
        raise EvalsetError(
            f"evaluation pool {name} was changed after it was built: {change}; delete {folder} "
            "to rebuild it"
        ) from None


def ensure_pool(name: str) -> Path:
    """The pool's folder, checked file by file against its build; built first when it is
    not built yet, or was built by an older autotune or from older generators."""
    pools = read_pools()
    if name not in pools:
        raise EvalsetError(
            f"no evaluation pool named {name!r}; pools: {', '.join(pools) or 'none'}"
        )
    folder = pools_dir() / name
    if os.path.lexists(folder) and not folder.is_dir():
        raise EvalsetError(
            f"evaluation pool {name}: {folder} {not_a_regular_file(folder) or 'is a file'}, not "
            "the pool's folder; remove it to build the pool there"
        )
    try:
        check_pool(name, folder, pools[name])
        return folder
    except NotBuilt as why:
        reason = str(why)
    _build(name, pools[name], reason)
    try:
        check_pool(name, folder, pools[name])
    except NotBuilt as why:
        raise EvalsetError(
            f"building the evaluation pool {name} left no build of it in {folder}: {why}"
        ) from None
    return folder


def _build(name: str, entry: PoolEntry, reason: str) -> None:
    """Run tools/make_pool.py, relaying its progress lines; a Ctrl-C reaches it too, and it
    is given time to remove its half-built folder."""
    if not (REPO_ROOT / "tools" / "make_pool.py").is_file():
        raise EvalsetError(
            f"evaluation pool {name!r} is not built and this installation has no tools/ to build "
            "it: run autotune from its git checkout, or pass --evalset with a set of your own"
        )
    print(
        f"building the evaluation pool {name} ({entry.items:,} items; {reason}) into "
        f"{pools_dir()} ...",
        file=sys.stderr,
        flush=True,
    )
    command = [sys.executable, "-m", "tools.make_pool", name, "--out", str(pools_dir())]
    command += ["--pools-file", str(pools_file())]
    errors: list[str] = []
    with subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as child:
        assert child.stderr is not None
        try:
            for line in child.stderr:
                if line.startswith(BUILD_PREFIX):
                    errors.append(line.removeprefix(BUILD_PREFIX).strip())
                else:
                    print(line, end="", file=sys.stderr, flush=True)
            child.wait()
        except BaseException:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
            raise
    if child.returncode != 0:
        last = errors[-1] if errors else f"it exited with status {child.returncode}"
        raise EvalsetError(f"building the evaluation pool {name} failed: {last}")
