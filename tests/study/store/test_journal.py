"""The journal file (the storage of --gpus studies) is never left torn, and a torn or edited
one is read, repaired or refused in one line, never with Optuna's JSONDecodeError.

Journals here are copies of the small study (tests/study_factory.py) in Optuna's journal
format; the commands run through the real CLI, in-process.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner, Result

from autotune.cli import main
from autotune.study.store.storage import StorageUnavailable, open_storage

RECOMMENDED = 2  # the small study's recommendation


def journal_of(small_study: tuple[str, str], path: Path) -> Path:
    url, name = small_study
    optuna.copy_study(
        from_study_name=name, from_storage=url, to_storage=open_storage(str(path), create=True)
    )
    return path


def writer(journal: Path) -> optuna.storages.BaseStorage:
    """The journal opened as `autotune run` opens it."""
    return open_storage(str(journal), create=True)


def best(journal: Path) -> Result:
    return CliRunner().invoke(main, ["best", "--storage", str(journal)])


def whole_lines(journal: Path) -> list[dict]:
    data = journal.read_bytes()
    assert data.endswith(b"\n"), data[-80:]
    return [json.loads(line) for line in data.splitlines()]


@contextlib.contextmanager
def small_disk(folder: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs at `folder` (the way tests/end_to_end/test_faults.py makes a full disk)."""
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill `disk` but for about `leave` bytes; the filler file."""
    filler = disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as handle:
        while True:
            handle.write(b"\0" * 4096)
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def test_a_full_disk_never_tears_the_journal_and_the_study_goes_on(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    """Optuna's writer left the start of a record on a full disk; every later append was glued
    to it and no reader got past that line. A record is written whole or not at all."""
    with small_disk(tmp_path / "disk") as disk:
        journal = journal_of(small_study, disk / "s.journal")
        study = optuna.load_study(study_name="small", storage=writer(journal))
        trial = study.ask()
        before = journal.read_bytes()
        filler = fill(disk, leave=3000)
        with pytest.raises(StorageUnavailable, match="No space left on device"):
            for index in range(20):  # records of 5 kB: the disk refuses one half-way
                trial.set_user_attr(f"attr-{index}", "x" * 5000)
        whole_lines(journal)
        assert journal.read_bytes().startswith(before)

        filler.unlink()  # space again: the study is read, and goes on
        shown = best(journal)
        assert shown.exit_code == 0, shown.output
        assert f"recommended: trial {RECOMMENDED}" in shown.output
        resumed = optuna.load_study(study_name="small", storage=writer(journal))
        resumed.set_user_attr("resumed", True)
        assert best(journal).exit_code == 0


def test_a_torn_last_record_is_ignored_by_readers_and_cut_off_by_a_run(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    """What a killed process (or an older autotune on a full disk) left: the first half of a
    record, without its newline."""
    journal = journal_of(small_study, tmp_path / "s.journal")
    whole = journal.read_bytes()
    record = json.dumps({"op_code": 5, "worker_id": "w", "trial_id": 1, "user_attr": {"a": 1}})
    torn = whole + record.encode()[: len(record) // 2]
    journal.write_bytes(torn)

    shown = best(journal)
    assert shown.exit_code == 0, shown.output
    assert f"recommended: trial {RECOMMENDED}" in shown.stdout
    assert f"last record was cut off after {len(torn) - len(whole)} byte(s)" in shown.stderr
    assert "is ignored; the next `autotune run` removes it" in shown.stderr
    assert journal.read_bytes() == torn  # a reader changes nothing

    run = subprocess.run(  # a run opening the study (the open, in a process of its own)
        [
            sys.executable,
            "-c",
            "from autotune.study.store.storage import open_storage; import optuna, sys; "
            "s = optuna.load_study(study_name='small', storage=open_storage(sys.argv[1], "
            "create=True)); s.set_user_attr('resumed', True)",
            str(journal),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert f"removed its last record, cut off after {len(torn) - len(whole)} byte(s)" in run.stderr
    assert "Traceback" not in run.stderr
    assert journal.read_bytes().startswith(whole)
    assert whole_lines(journal)[-1]["user_attr"] == {"resumed": True}
    assert best(journal).exit_code == 0


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"garbage\n", "not JSON"),
        (b'{"op_code": 99, "worker_id": "w"}\n', "AssertionError"),
        (b"[1, 2, 3]\n", "TypeError"),
        (b'{"op_code": 5, "worker_id": "w", "trial_id": "x", "user_attr": {"a": 1}}\n', ""),
        (b'{"op_code": 6, "worker_id": "w", "trial_id": 1, "state": "DONE"}\n', "ValueError"),
    ],
)
def test_a_line_that_is_no_optuna_record_is_one_line_naming_it(
    small_study: tuple[str, str], tmp_path: Path, line: bytes, why: str
) -> None:
    journal = journal_of(small_study, tmp_path / "s.journal")
    lines = journal.read_bytes().splitlines(keepends=True)
    edited = b"".join([*lines[:3], line, *lines[3:]])
    journal.write_bytes(edited)
    shown = best(journal)
    if shown.exit_code == 0:  # a record Optuna skips (a trial id it does not know)
        assert f"recommended: trial {RECOMMENDED}" in shown.stdout
    else:
        assert shown.exit_code == 2
        (error,) = [text for text in shown.stderr.splitlines() if text.startswith("error:")]
        assert f"journal {journal}: line 4 is not an Optuna record" in error and why in error
    assert "Traceback" not in shown.output
    assert journal.read_bytes() == edited
