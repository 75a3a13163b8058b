"""With real processes: the spool is used only when it is provably this user's, a forged
payload records nothing, a FIFO or an oversized spool file is refused in one line, an
impossible `duplicate_of` is named while the recommendation stays, and a journal's torn tail
of 2 MiB is cut off before `run` appends.

A study is made once by a real `autotune run` (one trial, the small space); each later run asks
for no more trials than it holds, so it only repairs and records what the spool holds, and
stops. Another user is played by files chowned to user id 12345 (the tests run as root).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from small_space import autotune_cli, run_study, small_space
from test_journal import RECOMMENDED, journal_of, whole_lines

from autotune.study.store.spool import SPOOL_FILE_MAX_BYTES, Spool

OTHER_UID = 12345
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root"),
    pytest.mark.slow,  # every test starts from a real one-trial study
]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the space, the study database) after a real one-trial run."""
    folder = tmp_path_factory.mktemp("spool-study")
    space = small_space(folder)
    done, study = run_study(space, study="s", cwd=folder, extra=("--trials", "1"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(study.trials) >= 1
    return space, folder / "s.db"


def rerun(space: Path, db: Path, temp: Path) -> subprocess.CompletedProcess[str]:
    """`autotune run` asking for no more trials: it repairs, records what the spool holds,
    and stops. TMPDIR: the temporary folder where the other spool folder lies."""
    env = {**os.environ, "TMPDIR": str(temp), "COLUMNS": "200"}
    return autotune_cli(
        "run", "--space", str(space), "--study", "s", "--storage", f"sqlite:///{db}",
        "--trials", "1", cwd=db.parent, env=env, timeout=600,
    )  # fmt: skip


def forged(number: int, *, values: list[float] | None = None) -> str:
    """What the issue's attacker wrote: a payload with no start, a splendid throughput."""
    return json.dumps(
        {"number": number, "started": None, "values": values or [99999.0, 1.0], "params": {},
         "distributions": {}, "user_attrs": {"config": {"backend": "transformers"}}}
    )  # fmt: skip


def copy_study(made: tuple[Path, Path], folder: Path) -> tuple[Path, Path, Path]:
    space, db = made
    folder.mkdir()
    copied = folder / "s.db"
    shutil.copy(db, copied)
    temp = folder / "tmp"
    temp.mkdir()
    return space, copied, temp


def trial_count(db: Path) -> int:
    return len(optuna.load_study(study_name="s", storage=f"sqlite:///{db}").trials)


def test_a_spool_of_another_user_or_unsafe_files_record_nothing(
    made: tuple[Path, Path], tmp_path: Path
) -> None:
    space, db, temp = copy_study(made, tmp_path / "a")
    before = trial_count(db)
    url = f"sqlite:///{db}"
    # The per-user folder in the temporary folder, made first by another user, open to all,
    # holding the forged trial.
    theirs = temp / f"autotune-spool-{os.getuid()}"
    theirs.mkdir()
    os.chown(theirs, OTHER_UID, -1)
    os.chmod(theirs, 0o777)
    spool = Spool(url, "s")
    leaf = theirs / spool.folders[1].name
    leaf.mkdir()
    (leaf / "trial-5.json").write_text(forged(5), encoding="utf-8")
    # The folder beside the study is ours: in it a forged payload, a FIFO, a file larger than
    # the bound, a symlink to /dev/zero and a file of another user.
    ours = spool.folders[0]
    ours.mkdir(mode=0o700)
    (ours / "trial-6.json").write_text(forged(6), encoding="utf-8")
    os.mkfifo(ours / "trial-7.json")
    with (ours / "trial-8.json").open("wb") as handle:
        handle.truncate(SPOOL_FILE_MAX_BYTES + 1)
    (ours / "trial-9.json").symlink_to("/dev/zero")
    (ours / "trial-10.json").write_text(forged(10), encoding="utf-8")
    os.chown(ours / "trial-10.json", OTHER_UID, -1)

    done = rerun(space, db, temp)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()

    def said(*words: str) -> list[str]:
        return [line for line in lines if all(word in line for word in words)]

    assert said(str(theirs), "is not used", f"belongs to user id {OTHER_UID}"), done.stderr
    assert said("trial 6", "discarded") or said("trial-6.json", "discarded"), done.stderr
    assert said("trial-7.json", "not a regular file"), done.stderr
    assert said("trial-8.json", "more than a spool file's 16 MiB"), done.stderr
    assert said("trial-9.json", "symlink"), done.stderr
    assert said("trial-10.json", f"belongs to user id {OTHER_UID}"), done.stderr
    assert not said("recorded the results"), done.stderr
    assert trial_count(db) == before  # nothing recorded
    assert (leaf / "trial-5.json").exists()  # another user's folder: not even touched


def test_a_spool_folder_others_can_write_is_not_used(
    made: tuple[Path, Path], tmp_path: Path
) -> None:
    space, db, temp = copy_study(made, tmp_path / "b")
    before = trial_count(db)
    ours = Spool(f"sqlite:///{db}", "s").folders[0]
    ours.mkdir()
    os.chmod(ours, 0o777)
    (ours / "trial-0.json").write_text(forged(0), encoding="utf-8")
    done = rerun(space, db, temp)
    assert done.returncode == 0, done.stderr[-3000:]
    refused = [line for line in done.stderr.splitlines() if str(ours) in line]
    assert len(refused) == 1 and "its mode is 0777: others can write to it" in refused[0]
    assert trial_count(db) == before


def test_an_impossible_duplicate_is_named_and_the_recommendation_stays(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    url, name = small_study
    db = tmp_path / "small.db"
    shutil.copy(url.removeprefix("sqlite:///"), db)
    storage = f"sqlite:///{db}"
    plain = autotune_cli("best", "--storage", storage, cwd=tmp_path, timeout=300)
    assert f"recommended: trial {RECOMMENDED}" in plain.stdout, plain.stderr
    with sqlite3.connect(db) as connection:  # the recommended trial said to repeat itself
        (trial_id,) = connection.execute(
            "SELECT trial_id FROM trials WHERE number = ?", (RECOMMENDED,)
        ).fetchone()
        connection.execute(
            "INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, ?, ?)",
            (trial_id, "duplicate_of", json.dumps(RECOMMENDED)),
        )
    shown = autotune_cli("best", "--storage", storage, cwd=tmp_path, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert f"recommended: trial {RECOMMENDED}" in shown.stdout
    (warning,) = shown.stderr.strip().splitlines()
    assert warning.startswith(f"warning: study '{name}', trial {RECOMMENDED}: its stored ")
    assert "duplicate_of 2 is impossible (it names the trial itself" in warning
    exported = autotune_cli("export", "--storage", storage, "--json", cwd=tmp_path, timeout=300)
    assert json.loads(exported.stdout)["trial"] == RECOMMENDED


def test_a_torn_tail_of_two_mebibytes_is_cut_off_before_a_run_appends(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    journal = journal_of(small_study, tmp_path / "s.journal")
    whole = journal.read_bytes()
    torn = 2 * 1024 * 1024
    journal.write_bytes(whole + b'{"op_code": 5, "user_attr": "' + b"x" * torn)
    run = subprocess.run(  # a run opening the study (the open, in a process of its own)
        [sys.executable, "-c",
         "from autotune.study.store.storage import open_storage; import optuna, sys; "
         "s = optuna.load_study(study_name='small', storage=open_storage(sys.argv[1], "
         "create=True)); s.set_user_attr('resumed', True)", str(journal)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    cut = torn + len(b'{"op_code": 5, "user_attr": "')
    assert f"removed its last record, cut off after {cut} byte(s)" in run.stderr
    assert journal.read_bytes().startswith(whole)
    assert whole_lines(journal)[-1]["user_attr"] == {"resumed": True}
    shown = autotune_cli("best", "--storage", str(journal), cwd=tmp_path, timeout=300)
    assert shown.returncode == 0 and f"recommended: trial {RECOMMENDED}" in shown.stdout
