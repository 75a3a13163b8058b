"""Bad input: the process registry and --enqueue files, generated from a fixed seed.

The registry (autotune.engines.leftovers) is data anyone who can write the temporary folder
may have shaped: each generated entry (garbage bytes, JSON of every type, wrong field types,
process groups 0, 1, -1, autotune's own, an unrelated process's, a near copy of its identity,
scratch folders outside the temporary folder, unmarked, behind a symlink, FIFOs and folders as
entries) goes through the real repair, in this process, under a private temporary folder. Each
must end without an exception and in time, say what it skipped in single lines, signal no
process (the bystanders in sessions of their own survive), remove no file outside the
registry, and write nothing.

Each generated --enqueue file (YAML and JSON lines; garbage, wrong shapes, values out of range,
duplicate names, too deep, too many, not a file) must be refused with one SpaceError line in
time, writing nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from small_space import small_space
from test_fuzz_inputs import CASE_TIMEOUT_S, deadline, snapshot

from autotune.engines.leftovers import clean_up, registry_folder
from autotune.engines.ownership import leader_of
from autotune.engines.scratch import MARKER, make_scratch
from autotune.errors import SpaceError
from autotune.space import load_space
from autotune.space.files import with_enqueued

SEED = 4
REGISTRY_CASES = 240
ENQUEUE_CASES = 200


# --- the process registry ---------------------------------------------------------------


class Scene:
    """A private temporary folder with bystander processes and canary folders to attack."""

    def __init__(self, tmp_path: Path) -> None:
        self.temp = tmp_path / "tmp"
        self.temp.mkdir()
        self.outside = tmp_path / "outside" / "autotune-server-keep"
        self.outside.mkdir(parents=True)
        (self.outside / "precious").write_text("keep", "utf-8")
        (self.outside / MARKER).write_text("f" * 32, "ascii")
        self.bystanders = [
            subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(2)
        ]

    def canaries(self) -> list[Path]:
        """Folders an entry may name that are not provably autotune's."""
        unmarked = self.temp / "autotune-server-unmarked"
        unmarked.mkdir(exist_ok=True)
        (unmarked / "precious").write_text("keep", "utf-8")
        link = self.temp / "autotune-server-link"
        if not link.is_symlink():
            link.symlink_to(self.outside)
        odd_markers = []
        for kind in ("folder", "fifo", "link"):
            folder = self.temp / f"autotune-server-{kind}-marker"
            odd_markers.append(folder)
            if folder.exists():
                continue
            folder.mkdir()
            (folder / "precious").write_text("keep", "utf-8")
            marker = folder / MARKER
            if kind == "folder":
                marker.mkdir()
            elif kind == "fifo":
                os.mkfifo(marker)
            else:
                marker.symlink_to(self.outside / MARKER)
        return [
            self.outside,
            unmarked,
            link,
            self.temp,
            self.outside.parent,
            Path("/"),
            *odd_markers,
        ]

    def close(self) -> None:
        for process in self.bystanders:
            with_suppressed(lambda p=process: os.killpg(p.pid, signal.SIGKILL))
            process.wait()


def with_suppressed(action: Callable[[], object]) -> None:
    with contextlib.suppress(ProcessLookupError):
        action()


@pytest.fixture
def scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    made = Scene(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(made.temp))
    try:
        yield made
    finally:
        made.close()


def junk(rng: random.Random, high: int = 300) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, high)))


def any_value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["int", "big", "float", "str", "bool", "none", "list", "dict"]
    kind = rng.choice(kinds if depth < 3 else kinds[:6])
    if kind == "int":
        return rng.choice([0, 1, -1, 2, os.getpid(), os.getpgrp(), 2**31 - 1, -(2**31)])
    if kind == "big":
        return rng.choice([2**31, 2**63, -(2**63), 10**30])
    if kind == "float":
        return rng.choice([0.0, -1.5, 1e300, float("nan"), float("inf"), time.time()])
    if kind == "str":
        return rng.choice(["", "1", "sleep", "../..", "/", "\u2028", "x" * 500, "\x00"])
    if kind == "bool":
        return rng.choice([True, False])
    if kind == "none":
        return None
    if kind == "list":
        return [any_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(FIELDS): any_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


FIELDS = ["pgid", "owner", "command", "leader", "token", "scratch", "pid", "started", "path"]


def dead_owner(rng: random.Random) -> dict[str, float]:
    return {"pid": rng.choice([2**22 - 1, 4_000_001, 99_999]), "started": rng.random() * 1e9}


def near_identity(rng: random.Random, pid: int) -> dict[str, Any]:
    """The bystander's identity, but never exactly: a start time or a command that differs."""
    leader = leader_of(pid)
    assert leader is not None
    cmdline = list(leader.cmdline)
    if rng.random() < 0.5:
        return {
            "started": leader.started + rng.choice([-3600, -1, 0.02, 0.5, 7]),
            "cmdline": cmdline,
        }
    return {"started": leader.started, "cmdline": rng.choice([[], ["sleep"], [*cmdline, "x"]])}


def registry_entries(rng: random.Random, scene: Scene) -> Iterator[tuple[str, str, Any]]:
    """(description, file name, content): bytes, a JSON-able value, or a kind of file."""
    bystander = scene.bystanders[0].pid
    canaries = scene.canaries()
    pgids = [0, 1, -1, os.getpgrp(), bystander, scene.bystanders[1].pid, 2**31 - 1]
    for index in range(REGISTRY_CASES):
        kind = index % 6
        pgid = rng.choice(pgids)
        name = f"{pgid}.json"
        if kind == 0:
            yield "junk bytes", name, junk(rng)
        elif kind == 1:
            yield "a JSON value of any shape", name, any_value(rng)
        elif kind == 2:
            entry = {field: any_value(rng) for field in rng.sample(FIELDS, rng.randint(1, 6))}
            yield "fields of any type", name, entry
        elif kind == 3:
            entry = {
                "pgid": pgid,
                "owner": dead_owner(rng),
                "command": ["sleep", "600"],
                "leader": near_identity(rng, bystander),
                "token": rng.choice(["", "x", "f" * 32]),
            }
            if rng.random() < 0.7:
                folder = rng.choice(canaries)
                entry["scratch"] = {"path": str(folder), "token": rng.choice(["f" * 32, "y"])}
            yield f"a near copy of a bystander's identity (pgid {pgid})", name, entry
        elif kind == 4:
            folder = rng.choice([*canaries, Path("a\x00b"), Path(""), Path("relative")])
            entry = {
                "pgid": rng.choice([pgid, 4_000_000 + index]),
                "owner": dead_owner(rng),
                "leader": {"started": 0.0, "cmdline": ["x"]},
                "token": "t",
                "scratch": {
                    "path": str(folder) + rng.choice(["", "/", "/.", "/../x"]),
                    "token": "f" * 32,
                },
            }
            yield f"a scratch folder not provably ours ({folder})", f"{entry['pgid']}.json", entry
        else:
            yield from odd_files(rng, index, name)


def odd_files(rng: random.Random, index: int, name: str) -> Iterator[tuple[str, str, Any]]:
    choice = index % 5
    if choice == 0:
        yield "a FIFO as an entry", name, "fifo"
    elif choice == 1:
        yield "a folder as an entry", name, "folder"
    elif choice == 2:
        yield "a symlink to a file outside", name, "symlink"
    elif choice == 3:
        yield "an entry over 64 KiB", name, b"[" * 70_000
    else:
        yield "a name that is no process group", rng.choice(["x.json", "\u2028.json", "-.json"]), {}


def write(folder: Path, name: str, content: Any, outside_file: Path) -> None:
    path = folder / name
    if content == "fifo":
        os.mkfifo(path)
    elif content == "folder":
        path.mkdir()
    elif content == "symlink":
        path.symlink_to(outside_file)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(json.dumps(content), encoding="utf-8")


def test_generated_registry_entries_touch_nothing_that_is_not_autotunes(scene: Scene) -> None:
    rng = random.Random(SEED)
    registry = registry_folder()
    before_outside = snapshot(scene.outside.parent)
    failures = []
    cases = list(registry_entries(rng, scene))
    assert len(cases) >= REGISTRY_CASES
    for description, name, content in cases:
        registry.mkdir(mode=0o700, exist_ok=True)
        for stale in registry.iterdir():
            if stale.is_dir() and not stale.is_symlink():
                stale.rmdir()
            else:
                stale.unlink()
        write(registry, name, content, scene.outside / "precious")
        around = {k: v for k, v in snapshot(scene.temp).items() if not k.startswith(str(registry))}
        try:
            with deadline(CASE_TIMEOUT_S):
                lines = clean_up()
        except Exception as exc:  # a traceback: the case failed
            failures.append(f"{description}: raised {type(exc).__name__}: {exc}")
            continue
        problems = []
        if not all(isinstance(line, str) and "\n" not in line for line in lines) or len(lines) > 1:
            problems.append(f"said {lines!r}")
        dead = [p.pid for p in scene.bystanders if p.poll() is not None]
        if dead:
            problems.append(f"killed the bystanders {dead}")
        after = {k: v for k, v in snapshot(scene.temp).items() if not k.startswith(str(registry))}
        if after != around or snapshot(scene.outside.parent) != before_outside:
            problems.append("removed or wrote a file outside the registry")
        left = [p.name for p in registry.iterdir() if p.is_file() and not p.is_symlink()]
        if left and content not in ("fifo", "folder"):
            problems.append(f"left the entry {left} to be read again")
        if problems:
            failures.append(f"{description} ({name}): {'; '.join(problems)}")
    assert not failures, f"{len(failures)} of {len(cases)} cases:\n" + "\n".join(failures[:30])
    assert all(p.poll() is None for p in scene.bystanders)
    assert (scene.outside / "precious").read_text("utf-8") == "keep"


def test_a_live_owners_entries_are_kept_untouched(scene: Scene) -> None:
    """Entries of a run in progress (this process) are never acted on, whatever they say."""
    rng = random.Random(SEED + 1)
    me = psutil.Process()
    registry = registry_folder()
    registry.mkdir(mode=0o700)
    for index in range(40):
        entry = {
            "pgid": rng.choice([0, 1, os.getpgrp(), scene.bystanders[0].pid]),
            "owner": {"pid": me.pid, "started": me.create_time()},
            "leader": near_identity(rng, scene.bystanders[0].pid),
            "scratch": {"path": str(rng.choice(scene.canaries())), "token": "f" * 32},
        }
        path = registry / f"{entry['pgid']}.json"
        path.write_text(json.dumps(entry), encoding="utf-8")
        with deadline(CASE_TIMEOUT_S):
            assert clean_up() == [], index
        assert path.exists() and all(p.poll() is None for p in scene.bystanders)
        path.unlink()
    assert (scene.outside / "precious").exists()


def test_a_scratch_folder_autotune_made_still_goes(scene: Scene) -> None:
    """The control: the fuzzing above would pass if nothing were ever removed."""
    ours = make_scratch("autotune-server-")
    registry = registry_folder()
    registry.mkdir(mode=0o700)
    entry = {
        "pgid": 4_000_000,
        "owner": {"pid": 4_000_001, "started": 1.0},
        "leader": {"started": 0.0, "cmdline": ["x"]},
        "scratch": {"path": str(ours), "token": (ours / MARKER).read_text("ascii")},
    }
    (registry / "4000000.json").write_text(json.dumps(entry), encoding="utf-8")
    assert clean_up() == []
    assert not ours.exists() and not (registry / "4000000.json").exists()


# --- --enqueue files ----------------------------------------------------------------------


def candidate(rng: random.Random, index: int) -> dict[str, Any]:
    return {"name": f"c{index}", "config": {"image_max_side": rng.choice([None, 64, 128])}}


def broken_candidate(rng: random.Random, index: int) -> Any:
    good = candidate(rng, index)
    choice = rng.randrange(9)
    if choice == 0:
        return any_value(rng)
    if choice == 1:
        return {"name": good["name"]}
    if choice == 2:
        return {"config": good["config"]}
    if choice == 3:
        return {**good, "config": rng.choice([[], "x", 1, None])}
    if choice == 4:
        return {**good, "config": {"batch_size": rng.choice([0, -1, 10**9, "x", 1.5, True])}}
    if choice == 5:
        return {**good, "config": {rng.choice(["nope", "gpu", "kv"]): 1}}
    if choice == 6:
        return {**good, "name": rng.choice(["", "x" * 81, 7, None, ["a"]])}
    if choice == 7:
        return {**good, "extra": 1}
    return {**good, "config": {"image_max_side": rng.choice([1, 10**6, -5, "big", float("nan")])}}


def enqueue_texts(rng: random.Random) -> Iterator[tuple[str, str, bytes]]:
    """(description, file suffix, content) of files that must each be refused."""
    for index in range(ENQUEUE_CASES - 8):
        kind = index % 5
        good = [candidate(rng, i) for i in range(rng.randint(0, 4))]
        bad = broken_candidate(rng, 99)
        entries = [*good, bad]
        rng.shuffle(entries)
        if kind == 0:
            yield "junk bytes", rng.choice([".yaml", ".jsonl"]), junk(rng)
        elif kind == 1:
            text = yaml.safe_dump(entries, allow_unicode=True)
            yield "a YAML list with one broken candidate", ".yaml", text.encode()
        elif kind == 2:
            lines = [json.dumps(entry, ensure_ascii=False) for entry in entries]
            yield "JSON lines with one broken candidate", ".jsonl", "\n".join(lines).encode()
        elif kind == 3:
            twice = [*good, candidate(rng, 0), candidate(rng, 0)]
            yield "a name used twice", ".yaml", yaml.safe_dump(twice).encode()
        else:
            shape = rng.choice([any_value(rng), {"candidates": any_value(rng)}, {"x": []}, []])
            if isinstance(shape, list) and shape and all(isinstance(e, dict) for e in shape):
                shape = {"not": shape}
            yield "a document of another shape", ".yaml", yaml.safe_dump(shape).encode()
    yield "YAML nested too deeply", ".yaml", b"[" * 20_000
    yield "JSON nested too deeply", ".jsonl", b"[" * 200_000
    yield "JSON with a torn last line", ".jsonl", b'{"name": "a", "config": {}}\n{"name": '
    yield "an empty file", ".yaml", b""
    yield "only blank JSON lines", ".jsonl", b"\n \n\n"
    many = "\n".join(json.dumps({"name": f"c{i}", "config": {}}) for i in range(100_001))
    yield "more candidates than a study runs", ".jsonl", many.encode()
    yield "a NUL byte", ".yaml", b"- name: a\x00\n  config: {}\n"
    yield "text that is not UTF-8", ".yaml", b"- name: \xff\xfe\n  config: {}\n"


def test_generated_enqueue_files_are_refused_in_one_line(tmp_path: Path) -> None:
    space = load_space(str(small_space(tmp_path, name="fuzz")))
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "folder.yaml").mkdir()
    os.mkfifo(inputs / "fifo.yaml")
    (inputs / "dangling.yaml").symlink_to(inputs / "gone.yaml")
    paths = [
        ("a folder", inputs / "folder.yaml"),
        ("a FIFO", inputs / "fifo.yaml"),
        ("a dangling symlink", inputs / "dangling.yaml"),
        ("/dev/null", Path("/dev/null")),
    ]
    for index, (description, suffix, content) in enumerate(enqueue_texts(random.Random(SEED))):
        path = inputs / f"case-{index:04d}{suffix}"
        path.write_bytes(content)
        paths.append((description, path))
    assert len(paths) >= ENQUEUE_CASES
    before = snapshot(tmp_path)
    failures = []
    for description, path in paths:
        try:
            with deadline(CASE_TIMEOUT_S):
                with_enqueued(space, str(path))
        except SpaceError as exc:
            message = str(exc)
            if "\n" in message or not message.strip():
                failures.append(f"{description} ({path.name}): not one line: {message!r}")
        except Exception as exc:
            failures.append(f"{description} ({path.name}): raised {type(exc).__name__}: {exc}")
        else:
            failures.append(f"{description} ({path.name}): accepted")
    assert snapshot(tmp_path) == before, "a refused file wrote something"
    assert not failures, f"{len(failures)} of {len(paths)} cases:\n" + "\n".join(failures[:30])


def test_there_are_at_least_three_hundred_cases() -> None:
    assert REGISTRY_CASES + ENQUEUE_CASES >= 300
