"""Pools: the pools file is checked for what it claims, and a built pool is re-hashed before a
study reads it; a pool changed after its build is refused by name, through the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.errors import EvalsetError
from autotune.evalset.integrity import BUILD_FILE, CACHE_FILE
from autotune.evalset.pools import POOLS_DIR_ENV, POOLS_FILE_ENV, ensure_pool, read_pools

REPO = Path(__file__).resolve().parents[2]
TEST_POOLS = REPO / "tests" / "evalset" / "pools.json"
POOL = "smoke-256"  # the smoke set and 16 more items: built in seconds
GOOD = json.loads(TEST_POOLS.read_text(encoding="utf-8"))[POOL]


def autotune(*args: str, env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autotune.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd), **env},
    )


def refused_in_one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    return lines[0]


# --- the pools file -------------------------------------------------------------------------

BAD_POOLS_FILES = [
    ('{"ocr-caption-3k": "x"}', "pool ocr-caption-3k: is not an object with base, items"),
    ("null", "is not an object of pools"),
    ("[1, 2]", "is not an object of pools"),
    ("not json", "is not valid JSON (expected ident at line 1 column 2)"),
    ("", "is not valid JSON"),
    ('{"a/b": ' + json.dumps(GOOD) + "}", "names a pool 'a/b': a name is a folder's"),
    ('{".hidden": ' + json.dumps(GOOD) + "}", "names a pool '.hidden'"),
    (json.dumps({"p": {**GOOD, "items": "256"}}), "pool p: items: Input should be a valid integer"),
    (json.dumps({"p": {**GOOD, "items": 0}}), "pool p: items: Input should be greater than 0"),
    (json.dumps({"p": {**GOOD, "items_sha256": "ab"}}), "pool p: items_sha256: String should"),
    (json.dumps({"p": {**GOOD, "extra": 1}}), "pool p: extra: Extra inputs are not permitted"),
    (json.dumps({"p": {"items": 256}}), "pool p: base: Field required"),
    ("[" * 100_000, "is not valid JSON"),
    ("\xff\xfe{}", "is not valid JSON"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_POOLS_FILES)
def test_a_pools_file_of_the_wrong_shape_is_one_line_naming_it(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "pools.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(EvalsetError) as info:
        read_pools(path)
    message = str(info.value)
    assert message.startswith(f"pools file {path} ") and expected in message
    assert "\n" not in message and message.endswith(f"fix it, or unset {POOLS_FILE_ENV}")


def test_a_pools_file_too_large_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "pools.json"
    path.write_text(" " * (2 * 1024 * 1024) + "{}", encoding="utf-8")
    with pytest.raises(EvalsetError, match="is 2,097,154 bytes, more than the 1,048,576 allowed"):
        read_pools(path)


def test_the_test_pools_are_valid() -> None:
    assert set(read_pools(TEST_POOLS)) == {"smoke-256", "ocr-caption-200"}


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text, encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (_fifo, "is not a regular file but a FIFO (a named pipe)"),
        (_dev_zero, "is not a regular file but a character device"),
        (_text('{"ocr-caption-3k": "x"}'), "pool ocr-caption-3k: is not an object"),
        (_text("null"), "is not an object of pools"),
        (_text("[1, 2]"), "is not an object of pools"),
        (_text("{not json"), "is not valid JSON"),
    ],
    ids=["fifo", "dev-zero", "entry-a-string", "null", "a-list", "not-json"],
)
def test_the_repositorys_pools_file_of_any_kind_is_one_line(
    tmp_path: Path, make: Callable[[Path], None], expected: str
) -> None:
    """evalsets/pools.json itself, in a copy of the package: the default path, read by
    `autotune evalset show ocr-caption-3k` in a real process, ends in one line in time."""
    shutil.copytree(REPO / "autotune", tmp_path / "autotune")
    (tmp_path / "evalsets").mkdir()
    make(tmp_path / "evalsets" / "pools.json")
    done = autotune("evalset", "show", "ocr-caption-3k", env={}, cwd=tmp_path)
    line = refused_in_one_line(done)
    assert f"pools file {tmp_path / 'evalsets' / 'pools.json'} {expected}" in line
    assert line.endswith("restore it with git checkout -- evalsets/pools.json")


# --- built pools ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built_pool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """smoke-256 built once by `autotune evalset build`, as a study's first use builds it."""
    pools = tmp_path_factory.mktemp("pools")
    done = autotune(
        "evalset", "build", POOL, env={POOLS_FILE_ENV: str(TEST_POOLS), POOLS_DIR_ENV: str(pools)}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"building the evaluation pool {POOL} (256 items; it is not built yet)" in done.stderr
    assert f"{POOL}: 16 of 16 new items (100%)" in done.stderr
    return pools / POOL


@pytest.fixture
def pool_copy(built_pool: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh copy of the built pool, and the environment that points autotune at it."""
    shutil.copytree(built_pool, tmp_path / POOL)
    return tmp_path / POOL, {POOLS_FILE_ENV: str(TEST_POOLS), POOLS_DIR_ENV: str(tmp_path)}


def _edit_answer(pool: Path) -> None:
    lines = (pool / "items.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    record = json.loads(lines[16])
    record["answers"] = ["WRONG"]
    lines[16] = json.dumps(record) + "\n"
    (pool / "items.jsonl").write_text("".join(lines), encoding="utf-8")


def _keep_five_lines(pool: Path) -> None:
    lines = (pool / "items.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (pool / "items.jsonl").write_text("".join(lines[:5]), encoding="utf-8")


def _swap_image(pool: Path) -> None:
    images = pool / "images"
    shutil.copy(images / "line-0002.png", images / "line-0001.png")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("alter", "expected"),
    [
        (_edit_answer, "items.jsonl line 17 differs from the build"),
        (_keep_five_lines, "items.jsonl has 5 lines, the build wrote 256"),
        (_swap_image, "images/line-0001.png "),
    ],
    ids=["an-answer-edited", "five-lines-left", "an-image-copied-over-another"],
)
def test_a_pool_changed_after_its_build_is_refused_by_name(
    pool_copy: tuple[Path, dict[str, str]], alter: Callable[[Path], None], expected: str
) -> None:
    pool, env = pool_copy
    first = autotune("evalset", "show", POOL, "--json", env=env)
    assert first.returncode == 0 and json.loads(first.stdout)["items"] == 256, first.stderr
    assert (pool / CACHE_FILE).is_file()  # the check passed and is remembered
    alter(pool)
    line = refused_in_one_line(autotune("evalset", "show", POOL, env=env))
    assert line.startswith(f"error: evaluation pool {POOL} was changed after it was built: ")
    assert expected in line and line.endswith(f"delete {pool} to rebuild it")


@pytest.mark.slow
def test_a_pool_an_older_autotune_built_is_built_again(
    pool_copy: tuple[Path, dict[str, str]],
) -> None:
    pool, env = pool_copy
    record = json.loads((pool / BUILD_FILE).read_text(encoding="utf-8"))
    older = {key: record[key] for key in ("pool", "items", "items_sha256", "images_sha256")}
    (pool / BUILD_FILE).write_text(json.dumps(older), encoding="utf-8")
    done = autotune("evalset", "build", POOL, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "an older autotune built it" in done.stderr
    assert json.loads((pool / BUILD_FILE).read_text(encoding="utf-8"))["files"]


def test_an_unknown_pool_names_the_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(POOLS_FILE_ENV, str(TEST_POOLS))
    with pytest.raises(EvalsetError, match="no evaluation pool named 'nope'; pools: smoke-256"):
        ensure_pool("nope")


def test_something_else_where_the_pool_goes_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(POOLS_FILE_ENV, str(TEST_POOLS))
    monkeypatch.setenv(POOLS_DIR_ENV, str(tmp_path))
    os.mkfifo(tmp_path / POOL)
    with pytest.raises(EvalsetError, match=r"is not a regular file but a FIFO .*, not the pool"):
        ensure_pool(POOL)
