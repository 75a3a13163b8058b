"""Bad input, evaluation pools: pools files of every shape, and a built pool changed in every
way after its build, generated from a fixed seed.

Each pools file case is read by `autotune evalset show` (in this process, click's CliRunner,
the file named by $AUTOTUNE_POOLS_FILE) and must end in one `error:` line naming the file,
with a non-zero exit, no traceback and nothing written. Each pool case changes one thing in a
fresh copy of a pool built once (smoke-256, tests/evalset/pools.json), after a check that
passed and was remembered, and must be refused in one line naming the pool and what changed,
building nothing; a case that changes no byte (a file touched, its mode changed) must pass.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_fuzz_inputs import CASE_TIMEOUT_S, Case, Sandbox, deadline, judge, make_sandbox, snapshot
from test_fuzz_stored import json_value, junk_text

from autotune.cli import main
from autotune.evalset.integrity import CACHE_FILE
from autotune.evalset.pools import POOLS_DIR_ENV, POOLS_FILE_ENV, ensure_pool

REPO = Path(__file__).resolve().parents[2]
TEST_POOLS = REPO / "tests" / "evalset" / "pools.json"
POOL = "smoke-256"
GOOD = json.loads(TEST_POOLS.read_text(encoding="utf-8"))[POOL]
SEED = 11
POOLS_FILE_CASES = 150
POOL_CASES = 120


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    return make_sandbox(tmp_path, monkeypatch)


# --- pools files ----------------------------------------------------------------------------

BAD_NAMES = ["", ".x", ".smoke-256.building-1-ab", "a/b", "../up", "x" * 65, "a b", "é", "-x"]
BAD_VALUES: dict[str, list[Any]] = {
    "base": [None, 1, "", "a/b", ".hidden", ["smoke"], {"x": 1}, True],
    "items": [0, -1, "256", 256.0, True, 10**6, None, [], {}, 2**70],
    "items_sha256": ["", "ab", "A" * 64, "g" * 64, 1, None, "0" * 63, "0" * 65],
    "images_sha256": ["", "ab", "F" * 64, 7, [], "0" * 65],
}


def _bad_entry(rng: random.Random) -> Any:
    """A pool entry that is wrong in one way: not an object, a field missing, a field of the
    wrong kind or value, or a field it does not know."""
    kind = rng.randrange(4)
    entry = dict(GOOD)
    if kind == 0:
        value = json_value(rng)
        return value if not isinstance(value, dict) else [value]
    if kind == 1:
        del entry[rng.choice(["base", "items", "items_sha256"])]
    elif kind == 2:
        field = rng.choice(sorted(BAD_VALUES))
        entry[field] = rng.choice(BAD_VALUES[field])
    else:
        entry[rng.choice(["extra", "Base", "hash", junk_text(rng) or "x"])] = json_value(rng)
    return entry


def pools_file_contents(rng: random.Random) -> tuple[str, bytes]:
    """(what, bytes) of a pools file wrong by construction."""
    kind = rng.randrange(6)
    if kind == 0:
        value = json_value(rng)
        if isinstance(value, dict):
            value = [value]
        return f"top level {type(value).__name__}", json.dumps(value).encode()
    if kind == 1:
        return "a bad entry", json.dumps({rng.choice(["p", POOL]): _bad_entry(rng)}).encode()
    if kind == 2:
        name = rng.choice(BAD_NAMES)
        return f"pool name {name!r}", json.dumps({name: GOOD}).encode()
    good = json.dumps({POOL: GOOD}).encode()
    if kind == 3:
        cut = rng.randrange(len(good))
        return f"cut at byte {cut}", good[:cut]
    if kind == 4:
        at = rng.randrange(len(good))
        junk = rng.choice([b"\xff", b"\x00", b"\xef\xbb\xbf", b"NaN", b",", b"}", b"\\"])
        return f"{junk!r} at byte {at}", good[:at] + junk + good[at + 1 :]
    return "a good pool beside a bad one", json.dumps({POOL: GOOD, "q": _bad_entry(rng)}).encode()


def _special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to(path.with_name("nowhere"))
    elif kind == "loop":
        path.symlink_to(path)
    else:
        path.write_bytes(b" " * (2 * 1024 * 1024))


def pools_file_cases(inputs: Path, rng: random.Random) -> list[tuple[Case, Path]]:
    cases = []
    for kind in ("fifo", "dev-zero", "folder", "dangling", "loop", "huge"):
        path = inputs / f"special-{kind}.json"
        _special(path, kind)
        cases.append((Case(f"pools file: {kind}", ["evalset", "show", POOL]), path))
    while len(cases) < POOLS_FILE_CASES:
        what, data = pools_file_contents(rng)
        path = inputs / f"pools-{len(cases)}.json"
        path.write_bytes(data)
        name = rng.choice([POOL, "ocr-caption-3k", "p"])
        cases.append((Case(f"pools file: {what}", ["evalset", "show", name]), path))
    return cases


def test_pools_files_of_every_shape_are_refused_in_one_line(sandbox: Sandbox) -> None:
    runner, failures = CliRunner(), []
    cases = pools_file_cases(sandbox.inputs, random.Random(SEED))
    for case, path in cases:
        before = snapshot(sandbox.work, sandbox.inputs)
        env = {POOLS_FILE_ENV: str(path), POOLS_DIR_ENV: str(sandbox.work / "pools")}
        with deadline(CASE_TIMEOUT_S):
            result = runner.invoke(main, case.args, env=env, catch_exceptions=True)
        problems = judge(result, Case(case.description, case.args, f"pools file {path} "))
        if not result.stderr.rstrip().endswith(f"unset {POOLS_FILE_ENV}"):
            problems.append("the line does not say how to fix it")
        if snapshot(sandbox.work, sandbox.inputs) != before:
            problems.append("files written or changed")
        if problems:
            failures.append(f"{case.description}: {'; '.join(problems)} ({result.stderr[:300]!r})")
    assert len(cases) >= POOLS_FILE_CASES
    assert not failures, f"{len(failures)} of {len(cases)} failed:\n" + "\n".join(failures[:30])


# --- built pools, changed -------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One change to a built pool, and what the refusal must say (None: it must pass)."""

    description: str
    apply: Callable[[Path], None]
    expect: str | None


def _lines(pool: Path) -> list[str]:
    return (pool / "items.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)


def _write_lines(pool: Path, lines: list[str]) -> None:
    (pool / "items.jsonl").write_text("".join(lines), encoding="utf-8")


def _image_change(rng: random.Random, built: Path, images: list[str]) -> Change:
    name = rng.choice(images)
    kind = rng.randrange(7)

    def flip(pool: Path) -> None:
        path = pool / name
        data, before = bytearray(path.read_bytes()), path.stat()
        at = rng.randrange(len(data))
        data[at] ^= 1 + rng.randrange(255)
        path.write_bytes(bytes(data))
        if rng.random() < 0.5:  # its times set back: the change time still shows it
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    if kind == 0:
        return Change(f"{name}: a byte changed", flip, f"{name} differs from the build")
    if kind == 1:
        cut = rng.randrange(1, 200)
        return Change(
            f"{name}: cut short",
            lambda p: p.joinpath(name).write_bytes(p.joinpath(name).read_bytes()[:-cut]),
            f"{name} is ",
        )
    if kind == 2:
        return Change(f"{name}: deleted", lambda p: p.joinpath(name).unlink(), f"{name} is missing")
    if kind == 3:
        other = rng.choice([i for i in images if i != name])
        same = (built / name).read_bytes() == (built / other).read_bytes()
        return Change(
            f"{name} copied over {other}",
            lambda p: shutil.copy(p / name, p / other),
            None if same else f"{other} ",
        )
    special = ["a FIFO", "a character device", "a folder"][kind - 4]

    def replace(pool: Path) -> None:
        path = pool / name
        path.unlink()
        if special == "a FIFO":
            os.mkfifo(path)
        elif special == "a character device":
            path.symlink_to("/dev/zero")
        else:
            path.mkdir()

    return Change(f"{name}: replaced by {special}", replace, f"{name} is ")


def _items_change(rng: random.Random, count: int) -> Change:
    kind = rng.randrange(6)
    k = rng.randrange(count)
    if kind == 0:

        def edit(pool: Path) -> None:
            lines = _lines(pool)
            record = json.loads(lines[k])
            record["answers"] = [record["answers"][0] + rng.choice("XYZ")]
            lines[k] = json.dumps(record, ensure_ascii=False) + "\n"
            _write_lines(pool, lines)

        return Change(f"line {k + 1}: an answer edited", edit, f"items.jsonl line {k + 1} differs")
    if kind == 1:
        keep = rng.randrange(count)
        return Change(
            f"items.jsonl cut to {keep} lines",
            lambda p: _write_lines(p, _lines(p)[:keep]),
            f"items.jsonl has {keep:,} lines, the build wrote {count}",
        )
    if kind == 2:
        where = f"items.jsonl line {k + 1} differs" if k < count - 1 else "has 255 lines"
        return Change(
            f"line {k + 1} deleted",
            lambda p: _write_lines(p, _lines(p)[:k] + _lines(p)[k + 1 :]),
            where,
        )
    if kind == 3:
        return Change(
            f"line {k + 1} repeated at the end",
            lambda p: _write_lines(p, [*_lines(p), _lines(p)[k]]),
            f"items.jsonl has 257 lines, the build wrote {count}",
        )
    if kind == 4:
        return Change(
            "Windows line ends",
            lambda p: p.joinpath("items.jsonl").write_bytes(
                p.joinpath("items.jsonl").read_bytes().replace(b"\n", b"\r\n")
            ),
            "items.jsonl line 1 differs",
        )
    return Change(
        "items.jsonl replaced by a FIFO",
        lambda p: (p.joinpath("items.jsonl").unlink(), os.mkfifo(p / "items.jsonl")),
        "items.jsonl is not a regular file but a FIFO",
    )


BAD_RECORD_VALUES: dict[str, list[Any]] = {
    "format": [1, 3, "2", None, 2.0],
    "pool": [None, 1, "", []],
    "items": [0, -1, "256", None, 10**6],
    "lines": [None, "x", [1], ["0" * 63]],
    "files": [None, [], {"items.jsonl": 1}, {"items.jsonl": {"bytes": -1, "sha256": "0"}}],
    "rendered_with": [None, [], {"pillow": 13}],
}


def _record_change(rng: random.Random) -> Change:
    kind = rng.randrange(4)
    if kind == 0:
        return Change(
            "build.json deleted", lambda p: p.joinpath("build.json").unlink(), "build.json "
        )
    if kind == 1:
        cut = rng.randrange(2, 5000)  # not the final newline alone: what is left is no JSON
        return Change(
            f"build.json cut {cut} bytes short",
            lambda p: p.joinpath("build.json").write_bytes(
                p.joinpath("build.json").read_bytes()[:-cut]
            ),
            "build.json is not a build record",
        )
    if kind == 2:
        field = rng.choice(sorted(BAD_RECORD_VALUES))
        value = rng.choice([*BAD_RECORD_VALUES[field], "(deleted)"])

        def damage(pool: Path) -> None:
            record = json.loads(pool.joinpath("build.json").read_text(encoding="utf-8"))
            if value == "(deleted)":
                del record[field]
            else:
                record[field] = value
            pool.joinpath("build.json").write_text(json.dumps(record), encoding="utf-8")

        return Change(f"build.json: {field} {value!r}", damage, "build.json is not a build record")
    return Change(
        "build.json replaced by a FIFO",
        lambda p: (p.joinpath("build.json").unlink(), os.mkfifo(p / "build.json")),
        "build.json is not a regular file but a FIFO",
    )


def _no_change(rng: random.Random, images: list[str]) -> Change:
    name = rng.choice([*images, "items.jsonl", "build.json"])
    if rng.random() < 0.5:
        return Change(f"{name} touched", lambda p: os.utime(p / name), None)
    return Change(f"{name} made read-only", lambda p: os.chmod(p / name, 0o444), None)


def pool_changes(rng: random.Random, pool: Path) -> list[Change]:
    images = sorted(f"images/{p.name}" for p in (pool / "images").iterdir())
    count = len(_lines(pool))
    changes = []
    while len(changes) < POOL_CASES:
        kind = rng.randrange(10)
        if kind < 4:
            changes.append(_image_change(rng, pool, images))
        elif kind < 7:
            changes.append(_items_change(rng, count))
        elif kind < 9:
            changes.append(_record_change(rng))
        else:
            changes.append(_no_change(rng, images))
    return changes


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("built")
    command = [sys.executable, "-m", "tools.make_pool", POOL, "--pools-file", str(TEST_POOLS)]
    done = subprocess.run(
        [*command, "--out", str(out), "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out / POOL


@pytest.mark.slow
def test_a_pool_changed_in_any_way_after_its_build_is_refused_by_name(
    built: Path, sandbox: Sandbox
) -> None:
    runner, failures = CliRunner(), []
    changes = pool_changes(random.Random(SEED), built)
    env = {POOLS_FILE_ENV: str(TEST_POOLS), POOLS_DIR_ENV: str(sandbox.work / "pools")}
    for change in changes:
        pool = sandbox.work / "pools" / POOL
        shutil.rmtree(pool.parent, ignore_errors=True)
        shutil.copytree(built, pool)
        os.environ.update(env)
        try:
            ensure_pool(POOL)  # a check that passes, remembered in .verified.json
        finally:
            for key in env:
                del os.environ[key]
        change.apply(pool)
        before = snapshot(pool.parent)
        with deadline(CASE_TIMEOUT_S):
            result = runner.invoke(main, ["evalset", "show", POOL], env=env, catch_exceptions=True)
        after = snapshot(pool.parent)
        if change.expect is None:
            problems = [] if result.exit_code == 0 else [f"refused: {result.stderr[:300]!r}"]
            changed = {k for k in before | after if before.get(k) != after.get(k)}
            problems += [f"wrote {sorted(changed)}"] if changed - {str(pool / CACHE_FILE)} else []
        else:
            said = f"evaluation pool {POOL} was changed after it was built: {change.expect}"
            problems = judge(result, Case(change.description, [], said))
            problems += [] if after == before else ["files written (a rebuild?)"]
        if problems:
            failures.append(f"{change.description}: {'; '.join(problems)}")
    assert len(changes) >= POOL_CASES
    assert not failures, f"{len(failures)} of {len(changes)} failed:\n" + "\n".join(failures[:30])
