"""The fault matrix, with real processes: a killed run, a locked database, a full disk.

Each fault costs at most the trial in flight: no process is left running, no measured result
is lost, no trial stays RUNNING, and `--trials N` still ends with N measured trials.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import TrialState
from small_space import small_space
from study_factory import build_study

from autotune.study.store.storage import StorageUnavailable, open_storage

pytestmark = pytest.mark.slow
# Eight configurations: enough for three measured trials whatever the sampler repeats.
PARAMS = {"batch_size": {"choices": [1, 2]}, "image_max_side": {"choices": [None, 256, 128, 64]}}


def start(space: Path, db: Path, trials: int, cwd: Path, **popen: object) -> subprocess.Popen[str]:
    """`autotune run` into the SQLite file `db`, or the journal `db` (a .journal path)."""
    storage = str(db) if db.suffix == ".journal" else f"sqlite:///{db}"
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "run", "--space", str(space),
         "--trials", str(trials), "--study", "s", "--storage", storage],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen,
    )  # fmt: skip


def fill_while_measuring(run: subprocess.Popen[str], disk: Path) -> tuple[str, Path]:
    """Fill `disk` once the run's reference is measured (its results cannot be stored then);
    the run's stderr and the filler."""
    assert run.stderr is not None
    lines = []
    for line in run.stderr:  # the plain progress lines name each phase
        lines.append(line)
        if "trial 0: load test" in line:
            break
    filler = disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as handle:
        while True:
            handle.write(b"\0" * 65536)
    _, rest = run.communicate(timeout=900)
    return "".join(lines) + rest, filler


def run_until_the_disk_is_full(db: Path, trials: int, cwd: Path) -> tuple[Path, Path]:
    """A run into `db` on its own small disk, which fills while the reference is measured: it
    ends in one line that says where the results are kept. (The space, the filler.)"""
    space = small_space(cwd, params=PARAMS)
    run = start(space, db, trials, cwd)
    stderr, filler = fill_while_measuring(run, db.parent)
    assert run.returncode == 2, stderr[-3000:]
    one_storage_error(stderr)
    return space, filler


def one_storage_error(stderr: str) -> None:
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "kept in" in errors[0], stderr
    assert "full" in errors[0] or "No space left" in errors[0]  # SQLite's words, or the OS's
    assert "run the same command again" in errors[0]


def every_failure_has_a_reason(study: optuna.Study) -> None:
    from autotune.study.store.recovery import failure_of

    for trial in study.trials:
        if trial.state == TrialState.FAIL:
            assert failure_of(study, trial).failure_reason, trial.number


def load(db: Path) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{db}")


def wait_for(condition, timeout_s: float = 240, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the database may not exist yet
            if condition():
                return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def running(db: Path, number: int) -> bool:
    trials = load(db).get_trials(deepcopy=False)
    return len(trials) > number and trials[number].state == TrialState.RUNNING


def measured(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [
        t
        for t in study.trials
        if "duplicate_of" not in t.user_attrs and "failure_kind" not in t.user_attrs
    ]


class Tree:
    """Every process seen below `pid` while it runs (pids only: they are checked afterwards)."""

    def __init__(self, pid: int) -> None:
        self.root = pid
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.seen |= {c.pid for c in psutil.Process(self.root).children(recursive=True)}
            time.sleep(0.1)

    def stop(self) -> set[int]:
        self._stop.set()
        self._thread.join()
        return self.seen


def alive(pids: set[int]) -> list[int]:
    left = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
    return left


def gone_soon(pids: set[int], timeout_s: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive(pids)


def test_sigkill_of_the_run_leaves_no_worker_and_the_next_run_repairs(tmp_path: Path) -> None:
    space = small_space(tmp_path, params=PARAMS)
    db = tmp_path / "s.db"
    run = start(space, db, 3, tmp_path)
    tree = Tree(run.pid)
    wait_for(lambda: running(db, 1), what="trial 1 to run")
    time.sleep(0.5)
    run.kill()  # SIGKILL: autotune can clean up nothing itself
    run.communicate(timeout=60)
    assert len(tree.stop()) >= 2  # the guard and the worker were there
    assert not gone_soon(tree.seen), "processes outlived the killed run"
    assert running(db, 1)  # what the killed run left behind

    again = start(space, db, 3, tmp_path)
    _, stderr = again.communicate(timeout=900)
    assert again.returncode == 0, stderr[-3000:]
    assert "trial 1 failed: its process (pid" in stderr  # failed at once, not after 120 s
    study = load(db)
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    orphan = study.trials[1]
    assert orphan.state == TrialState.FAIL and orphan.user_attrs["failure_kind"] == "orphaned"
    assert len(measured(study)) == 3  # --trials 3: three measured trials, the orphan aside


@pytest.mark.swift
def test_sigkill_during_a_swift_deploy_trial_stops_the_server(tmp_path: Path) -> None:
    pytest.importorskip("swift")
    db = tmp_path / "s.db"
    # Its own temporary folder: the launch's scratch folder and the process registry land
    # here, apart from any other run's.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    run = start(Path("smoke-swift"), db, 1, Path(__file__).resolve().parents[2], env=env)
    tree = Tree(run.pid)

    def serving() -> bool:
        for pid in list(tree.seen):
            with contextlib.suppress(psutil.Error):
                if any(
                    c.status == psutil.CONN_LISTEN
                    for c in psutil.Process(pid).net_connections(kind="inet")
                ):
                    return True
        return False

    wait_for(serving, timeout_s=180, what="swift deploy to listen")
    assert list(scratch.glob("autotune-server-*"))
    run.kill()
    run.communicate(timeout=60)
    assert not gone_soon(tree.stop()), "swift deploy outlived the killed run"
    # The next run's repair removes the launch's scratch folder, which the killed run could
    # not.
    repair = "from autotune.engines.leftovers import clean_up; clean_up()"
    subprocess.run([sys.executable, "-c", repair], env=env, check=True, timeout=60)
    assert not list(scratch.glob("autotune-server-*"))


def test_a_locked_database_costs_time_not_a_trial(tmp_path: Path) -> None:
    space = small_space(tmp_path, params=PARAMS)
    db = tmp_path / "s.db"
    # SQLite's busy timeout at 2 s instead of 30: the lock below outlasts it four times over.
    env = {**os.environ, "AUTOTUNE_SQLITE_BUSY_TIMEOUT_S": "2"}
    run = start(space, db, 3, tmp_path, env=env)
    wait_for(lambda: running(db, 1), what="trial 1 to run")
    # Another process takes SQLite's write lock for 8 s, longer than SQLite's own busy
    # timeout: autotune must wait it out and record the trial.
    lock = sqlite3.connect(db, timeout=60, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    time.sleep(8)
    lock.execute("COMMIT")
    lock.close()
    _, stderr = run.communicate(timeout=900)
    assert run.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    study = load(db)
    assert [t.state for t in measured(study)] == [TrialState.COMPLETE] * 3
    assert not [t for t in study.trials if t.state in (TrialState.RUNNING, TrialState.FAIL)]


def test_a_read_waits_out_a_locked_database(tmp_path: Path) -> None:
    """Reads wait too: a reader meets SQLite's busy timeout while another process holds the
    exclusive lock, as a running study's trial reads its reference (found with two test
    processes sharing two cores)."""
    url, name = build_study(tmp_path)
    db = tmp_path / f"{name}.db"
    lock = sqlite3.connect(db, timeout=60, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    env = {**os.environ, "AUTOTUNE_SQLITE_BUSY_TIMEOUT_S": "1", "COLUMNS": "200"}
    best = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "best", "--storage", url, "--study", name],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    time.sleep(4)  # four busy timeouts over
    lock.execute("COMMIT")
    lock.close()
    stdout, stderr = best.communicate(timeout=120)
    assert best.returncode == 0, stderr[-3000:]
    assert "recommended: trial" in stdout


def test_every_storage_call_of_optunas_cache_waits_out_a_lock() -> None:
    """Optuna's cached storage, which every RDB study gets, calls private methods of its
    backend (`_set_trial_param`, `_create_new_trial`) instead of the public ones. Unretried, a
    lock taken between a trial's read and its commit ended a run in a StorageInternalError
    traceback (seen in CI while trial 1 chose its first parameter): so each public call of the
    cache is retried whole, by the storage that wraps it."""
    from optuna.storages import _cached_storage

    from autotune.study.store.database import RetryingStorage

    cache = _cached_storage._CachedStorage
    public = {n for n, v in vars(cache).items() if callable(v) and not n.startswith("_")}
    settings = {"get_heartbeat_interval", "get_heartbeat_stale_trial_callback", "delete_study"}
    assert {"set_trial_param", "create_new_trial", "get_all_trials"} <= public
    unretried = [
        name
        for name in sorted(public - settings)
        if not hasattr(getattr(RetryingStorage, name), "__wrapped__")
    ]
    assert not unretried, unretried


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `folder` (made here) while the block runs."""
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]
    if subprocess.run(mount).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk_ends_in_one_line_and_keeps_the_results(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "4m") as disk:
        db = disk / "s.db"
        space, filler = run_until_the_disk_is_full(db, 3, tmp_path)

        filler.unlink()  # space again: the next run records what was kept
        again = start(space, db, 3, tmp_path)
        _, stderr = again.communicate(timeout=900)
        assert again.returncode == 0, stderr[-3000:]
        assert "recorded the results of trial 0" in stderr
        study = load(db)
        recovered = [t for t in study.trials if "recovered_from_trial" in t.user_attrs]
        # The reference was being measured when the disk filled; when SQLite noticed only on a
        # later write, the next trial's results were kept too. Each is recorded once.
        origins = [t.user_attrs["recovered_from_trial"] for t in recovered]
        assert 0 in origins and len(origins) == len(set(origins)), origins
        assert all(t.user_attrs["throughput_output_tokens_per_s"] > 0 for t in recovered)
        assert [t.user_attrs.get("is_reference") for t in recovered].count(True) == 1
        assert not [t for t in study.trials if t.state == TrialState.RUNNING]
        assert len(measured(study)) >= 3
        every_failure_has_a_reason(study)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_journal_study_on_a_full_disk_resumes_once_space_is_freed(tmp_path: Path) -> None:
    """Journals are the storage of --gpus studies. The refused write leaves no torn record, so
    the rerun reads the journal, records the kept results and `best` shows them."""
    with tmpfs(tmp_path / "disk", "4m") as disk:
        journal = disk / "s.journal"
        space, filler = run_until_the_disk_is_full(journal, 1, tmp_path)
        assert journal.read_bytes().endswith(b"\n")

        filler.unlink()
        again = start(space, journal, 1, tmp_path)
        _, stderr = again.communicate(timeout=900)
        assert again.returncode == 0, stderr[-3000:]
        assert "Traceback" not in stderr and "recorded the results of trial 0" in stderr
        study = optuna.load_study(study_name="s", storage=open_storage(str(journal), create=False))
        assert [t.state for t in study.trials].count(TrialState.COMPLETE) == 1
        every_failure_has_a_reason(study)
        best = subprocess.run(
            [sys.executable, "-m", "autotune.cli", "best", "--storage", str(journal)],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
        assert best.returncode == 0, best.stderr
        assert "recommended: trial 1" in best.stdout


@contextlib.contextmanager
def full_disk(folder: Path) -> object:
    """A 2 MiB tmpfs at `folder`, filled to the last byte; yields the filler file."""
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        filler = folder / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as handle:
            while True:
                handle.write(b"\0" * 4096)
        yield filler
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_heartbeat_the_full_disk_refuses_is_skipped_and_the_next_write_says_why(
    tmp_path: Path,
) -> None:
    """Optuna beats from a background thread, where an exception is only a traceback on
    stderr: a refused beat is skipped, and the trial's own next write reports the disk."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        storage = open_storage(f"sqlite:///{disk}/s.db", create=True)
        study = optuna.create_study(study_name="s", storage=storage)
        trial = study.ask()
        with contextlib.suppress(OSError), (disk / "filler").open("wb") as handle:
            while True:
                handle.write(b"\0" * 4096)
        # Enough rows that SQLite needs a new page for them.
        for _ in range(50):
            storage.record_heartbeat(trial._trial_id)  # no exception: skipped
        with pytest.raises(StorageUnavailable, match="full"):
            for index in range(200):
                trial.set_user_attr(f"attr-{index}", "x" * 2000)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_disk_full_before_the_study_is_created_leaves_nothing_and_a_rerun_works(
    tmp_path: Path, kind: str
) -> None:
    space = small_space(tmp_path, trials=1, params=PARAMS)
    with full_disk(tmp_path / "disk") as filler:
        where = tmp_path / "disk" / ("s.db" if kind == "sqlite" else "s.journal")
        storage = f"sqlite:///{where}" if kind == "sqlite" else str(where)
        command = [sys.executable, "-m", "autotune.cli", "run", "--space", str(space),
                   "--study", "s", "--storage", storage]  # fmt: skip
        failed = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert failed.returncode != 0
        assert "Traceback" not in failed.stderr, failed.stderr[-3000:]
        errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, failed.stderr[-3000:]
        # Nothing half-made is left for the next run to trip over.
        assert sorted(p.name for p in where.parent.iterdir()) == ["filler"]
        filler.unlink()
        again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        stored = open_storage(storage, create=False)
        assert [s.study_name for s in optuna.get_all_study_summaries(stored)] == ["s"]


def test_an_out_of_memory_trial_is_infeasible_for_the_sampler_and_not_counted(
    tmp_path: Path,
) -> None:
    """Recorded PRUNED with its memory constraint violated: TPE ranks it among the worst
    instead of ignoring it (as it ignores FAIL), and --trials does not count it."""
    from autotune.errors import TrialFailure
    from autotune.study.results.counting import counted_trials
    from autotune.study.run.objective import OOM_VIOLATION, fail_trial
    from autotune.study.store.spool import ArtifactRecorder

    study = optuna.create_study(directions=["maximize", "minimize"])
    trial = study.ask({"batch_size": optuna.distributions.CategoricalDistribution([64, 256])})
    oom = TrialFailure("CUDA out of memory", kind="oom", log_tail="")
    with pytest.raises(optuna.TrialPruned):
        fail_trial(trial, oom, ArtifactRecorder(f"sqlite:///{tmp_path}/x.db", "x"))
    study.tell(trial, state=TrialState.PRUNED)
    frozen = study.trials[0]
    assert frozen.user_attrs["failure_kind"] == "oom"
    assert frozen.constraints["memory"] == OOM_VIOLATION  # what constrained TPE reads
    assert counted_trials(study) == 0
    with pytest.raises(TrialFailure):  # any other failure stays a FAIL
        fail_trial(study.ask(), TrialFailure("boom", kind="crash"), ArtifactRecorder("", "x"))
