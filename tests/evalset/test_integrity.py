"""A built pool's record names the first file or line changed since its build, and a check
that passed is remembered by the files' metadata, never by their names alone."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from autotune.evalset.integrity import (
    BUILD_FILE,
    CACHE_FILE,
    NotBuilt,
    PoolChanged,
    read_build_record,
    verify_build,
    write_build_record,
)

LINES = 12


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """A folder as a build leaves it: items.jsonl, three images, build.json."""
    folder = tmp_path / "pool"
    (folder / "images").mkdir(parents=True)
    images = []
    for i in range(3):
        (folder / "images" / f"a-{i}.png").write_bytes(bytes([i]) * (100 + i))
        images.append(f"images/a-{i}.png")
    lines = [json.dumps({"id": f"a-{i}", "answers": [f"A{i}"]}) for i in range(LINES)]
    (folder / "items.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_build_record(folder, pool="p", images=images, rendered_with={"pillow": "x"})
    return folder


def change(folder: Path) -> str:
    record, data = read_build_record(folder)
    with pytest.raises(PoolChanged) as info:
        verify_build(folder, record, data)
    return str(info.value)


def verify(folder: Path) -> None:
    verify_build(folder, *read_build_record(folder))


def test_an_unchanged_build_passes_and_is_remembered(built: Path) -> None:
    verify(built)
    cache = json.loads((built / CACHE_FILE).read_text(encoding="utf-8"))
    assert sorted(cache["files"]) == [f"images/a-{i}.png" for i in range(3)] + ["items.jsonl"]
    verify(built)  # and again, from the cache


def test_an_edited_answer_names_its_line(built: Path) -> None:
    verify(built)
    items = built / "items.jsonl"
    items.write_text(items.read_text(encoding="utf-8").replace('"A7"', '"B7"'), encoding="utf-8")
    assert change(built) == "items.jsonl line 8 differs from the build"


def test_a_truncated_items_file_says_how_many_lines_are_left(built: Path) -> None:
    items = built / "items.jsonl"
    items.write_text("".join(items.read_text(encoding="utf-8").splitlines(True)[:5]), "utf-8")
    assert change(built) == f"items.jsonl has 5 lines, the build wrote {LINES}"


def test_an_image_copied_over_another_is_named(built: Path) -> None:
    verify(built)
    shutil.copy(built / "images" / "a-0.png", built / "images" / "a-1.png")
    assert change(built) == "images/a-1.png is 100 bytes, the build wrote 101"


def test_a_change_of_the_same_size_with_its_time_set_back_is_still_seen(built: Path) -> None:
    verify(built)
    target = built / "images" / "a-2.png"
    before = target.stat()
    target.write_bytes(b"\xff" * before.st_size)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert change(built) == "images/a-2.png differs from the build"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p.unlink(), "images/a-1.png is missing"),
        (lambda p: (p.unlink(), os.mkfifo(p)), "images/a-1.png is not a regular file but a FIFO"),
        (lambda p: (p.unlink(), p.symlink_to("/dev/zero")), "is not a regular file but a char"),
        (lambda p: (p.unlink(), p.mkdir()), "images/a-1.png is a folder, not a file"),
        (lambda p: p.write_bytes(b"x" * 10_000), "images/a-1.png is 10,000 bytes"),
    ],
)
def test_an_image_that_is_no_longer_the_file_the_build_wrote(
    built: Path, make: object, expected: str
) -> None:
    verify(built)
    make(built / "images" / "a-1.png")  # type: ignore[operator]
    assert expected in change(built)


def test_a_record_of_the_very_signatures_is_trusted_without_reading(built: Path) -> None:
    """What makes a second check fast: the cache is believed while every file's metadata is
    what it recorded, so a cache rewritten for changed files hides the change. Only autotune
    writes it, after a check that passed."""
    verify(built)
    (built / "images" / "a-1.png").write_bytes(bytes([9]) * 101)
    assert change(built) == "images/a-1.png differs from the build"
    cache = json.loads((built / CACHE_FILE).read_text(encoding="utf-8"))
    info = (built / "images" / "a-1.png").stat()
    signature = [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]
    cache["files"]["images/a-1.png"] = signature
    (built / CACHE_FILE).write_text(json.dumps(cache), encoding="utf-8")
    verify(built)


@pytest.mark.parametrize("cache", ["", "[1]", '{"record_sha256": 1}', "\x00" * 9])
def test_a_damaged_cache_is_no_verdict(built: Path, cache: str) -> None:
    (built / CACHE_FILE).write_text(cache, encoding="utf-8")
    (built / "images" / "a-0.png").write_bytes(b"\x07" * 100)
    assert change(built) == "images/a-0.png differs from the build"


def test_a_record_that_is_not_one_is_a_change_and_an_older_one_is_not_built(built: Path) -> None:
    (built / BUILD_FILE).write_text('{"pool": "p"}', encoding="utf-8")
    with pytest.raises(PoolChanged, match=r"build.json is not a build record \(format: Field"):
        read_build_record(built)
    older = {"pool": "p", "items": 12, "items_sha256": "0" * 64, "images_sha256": "1" * 64}
    (built / BUILD_FILE).write_text(json.dumps(older), encoding="utf-8")
    with pytest.raises(NotBuilt, match="an older autotune built it"):
        read_build_record(built)
    (built / BUILD_FILE).unlink()
    os.mkfifo(built / BUILD_FILE)
    with pytest.raises(PoolChanged, match="build.json is not a regular file but a FIFO"):
        read_build_record(built)
    with pytest.raises(NotBuilt, match="not built yet"):
        read_build_record(built / "nowhere")


def test_a_record_listing_a_file_outside_the_pool_is_a_change(built: Path) -> None:
    record = json.loads((built / BUILD_FILE).read_text(encoding="utf-8"))
    record["files"]["../outside.png"] = record["files"].pop("images/a-0.png")
    (built / BUILD_FILE).write_text(json.dumps(record), encoding="utf-8")
    assert change(built) == "build.json lists '../outside.png', outside the pool's folder"
