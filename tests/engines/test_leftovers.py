"""The process registry acts only on what is provably autotune's (issue 30's four attacks).

Every test runs with its own temporary folder (tempfile.tempdir here, TMPDIR in the processes
it starts), so the registry and the scratch folders are its own, apart from any other run's.
Each attack is made for real: real processes in sessions of their own, real folders; an
entry is written the way an attacker who can write the shared temporary folder would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from small_space import small_space

from autotune.engines import leftovers
from autotune.engines.leftovers import clean_up, record, registry_folder
from autotune.engines.ownership import leader_of
from autotune.engines.process import group_alive, wait_group_gone
from autotune.engines.scratch import MARKER, make_scratch

REPO = Path(__file__).resolve().parents[2]
GUARD = [sys.executable, "-m", "autotune.engines.guard"]


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


@contextlib.contextmanager
def bystander(*argv: str) -> object:
    """An unrelated process in a session of its own (its pgid is its pid), killed at the end."""
    process = subprocess.Popen(list(argv or ["sleep", "600"]), start_new_session=True)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def dead_owner() -> dict[str, float]:
    """The owner of an entry: a process that has exited (its pid reaped)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return {"pid": gone.pid, "started": time.time() - 60}


def write_entry(pgid: int, **fields: object) -> Path:
    folder = registry_folder()
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{pgid}.json"
    path.write_text(json.dumps({"pgid": pgid, "owner": dead_owner(), **fields}), "utf-8")
    return path


def leader_fields(pid: int, **changes: object) -> dict[str, object]:
    """The identity record() would store for the process `pid` as it runs now."""
    leader = leader_of(pid)
    assert leader is not None
    return {"started": leader.started, "cmdline": list(leader.cmdline), **changes}


def survives(process: subprocess.Popen[bytes]) -> bool:
    time.sleep(0.2)  # a SIGKILL sent to it has landed by now
    return process.poll() is None and group_alive(process.pid)


# --- what autotune does own is still stopped and removed --------------------------------


OWNER = """
import os, signal, sys, time
import psutil
from autotune.engines.process import ManagedProcess
from autotune.engines.scratch import make_scratch
scratch = make_scratch("autotune-server-")
group = ManagedProcess(sys.argv[2:], log_path=scratch / "server-1.log").start()
# Until the guard has started its command and that command its helpers.
while len(psutil.Process(group.pid).children(recursive=True)) < int(sys.argv[1]):
    time.sleep(0.05)
print(group.pid, scratch, flush=True)
# The guard would take its group down when we die: stopped, it cannot (the escape the
# registry is the second line against).
os.kill(group.pid, signal.SIGSTOP)
os._exit(0)  # no stop(), no forget(): what a SIGKILLed run leaves
"""


def leave_a_group(*command: str, processes: int) -> tuple[int, Path]:
    """A group running `command` (`processes` processes below its guard) whose owner died."""
    out = subprocess.run(
        [sys.executable, "-c", OWNER, str(processes), *command],
        capture_output=True, text=True, timeout=60, check=True, cwd=REPO,
    )  # fmt: skip
    pid, scratch = out.stdout.split()
    return int(pid), Path(scratch)


@pytest.mark.slow
def test_a_group_left_by_a_dead_owner_is_stopped_and_its_scratch_removed(temp: Path) -> None:
    pgid, scratch = leave_a_group("sleep", "600", processes=1)
    try:
        assert group_alive(pgid) and (scratch / MARKER).is_file()
        lines = clean_up()
        assert wait_group_gone(pgid, timeout_s=10)
        assert not scratch.exists()
        assert len(lines) == 1 and lines[0].startswith(f"stopped process group {pgid} ("), lines
        assert not list(registry_folder().iterdir())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.slow
def test_a_group_whose_leader_died_is_stopped_by_its_token(temp: Path) -> None:
    """A server's helpers can outlive the guard that led their group: they carry the token
    autotune put in the guard's environment, and are stopped by it."""
    # The kernel hangs up a group left orphaned with a stopped member (the stopped guard):
    # the helper ignores that, as a daemonised server's helper would.
    pgid, scratch = leave_a_group("sh", "-c", "trap '' HUP; sleep 600 & wait", processes=2)
    try:
        helpers = [p for p in psutil.process_iter() if os.getpgid(p.pid) == pgid]
        os.kill(pgid, signal.SIGKILL)  # the guard; its sh dies with it, sh's sleep does not
        deadline = time.monotonic() + 10
        while psutil.pid_exists(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group_alive(pgid), "the helper should outlive the leader"
        lines = clean_up()
        assert wait_group_gone(pgid, timeout_s=10), lines
        assert lines[0].startswith(f"stopped process group {pgid}"), lines
        assert not scratch.exists()
    finally:
        for helper in helpers:
            with contextlib.suppress(psutil.Error):
                helper.kill()


def test_entries_of_a_live_owner_are_kept(temp: Path) -> None:
    with bystander() as sleeper:
        record(sleeper.pid, ["sleep", "600"], token="t")
        entry = json.loads((registry_folder() / f"{sleeper.pid}.json").read_text("utf-8"))
        assert entry["leader"]["cmdline"] == ["sleep", "600"] and entry["token"] == "t"
        assert clean_up() == []  # its owner (this process) is alive: a run in progress
        assert survives(sleeper)
        assert (registry_folder() / f"{sleeper.pid}.json").exists()


# --- attack 1: a stale entry naming an unrelated process's group -------------------------


def test_an_unrelated_group_named_by_a_stale_entry_survives_the_repair(temp: Path) -> None:
    with bystander() as sleeper:
        pgid = sleeper.pid
        variants = {
            # what autotune stored for a group that has since died, its pgid now the sleeper's
            "another start time": leader_fields(pgid, started=time.time() - 3600),
            "another command": leader_fields(pgid, cmdline=[*GUARD, "sleep", "600"]),
            "written before leaders were recorded": None,
        }
        for why, leader in variants.items():
            path = write_entry(pgid, command=["sleep", "600"], leader=leader, token="x")
            if leader is None:
                path.write_text(json.dumps({"pgid": pgid, "owner": dead_owner()}), "utf-8")
            lines = clean_up()
            assert survives(sleeper), why
            assert len(lines) == 1 and "nothing signalled" in lines[0], (why, lines)
            assert f"process group {pgid}" in lines[0]
            assert not path.exists()  # said once, not at every run


def test_an_unrelated_group_survives_autotune_run(temp: Path, tmp_path: Path) -> None:
    """The same attack through the command: `autotune run` repairs before its first trial;
    it is interrupted once it has said what it skipped."""
    space = small_space(tmp_path)
    with bystander() as sleeper:
        stale = leader_fields(sleeper.pid, started=1.0)
        write_entry(sleeper.pid, command=["sleep", "600"], leader=stale)
        run = subprocess.Popen(
            [sys.executable, "-m", "autotune.cli", "run", "--space", str(space), "--trials", "1",
             "--study", "s", "--storage", f"sqlite:///{tmp_path / 's.db'}"],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path,
            start_new_session=True,
        )  # fmt: skip
        assert run.stderr is not None
        said = []
        for line in run.stderr:
            said.append(line)
            if "process registry entry" in line or "Traceback" in line:
                break
        os.killpg(run.pid, signal.SIGINT)
        rest = run.communicate(timeout=120)[1]
        assert survives(sleeper), "".join(said) + rest
        assert f"skipped the process registry entry {sleeper.pid}.json" in said[-1], said


# --- attack 2: a registry folder that someone else made ----------------------------------


def test_a_registry_folder_open_to_all_is_refused(temp: Path) -> None:
    with bystander() as sleeper:
        # The entry names the sleeper exactly: only the folder check stands in the way.
        path = write_entry(sleeper.pid, leader=leader_fields(sleeper.pid), token="x")
        os.chmod(registry_folder(), 0o777)
        lines = clean_up()
        assert survives(sleeper) and path.exists()
        assert len(lines) == 1 and "did not use the process registry" in lines[0]
        assert "mode is 0777" in lines[0], lines
        record(os.getpid(), ["x"])  # nor is anything written into it
        assert sorted(p.name for p in registry_folder().iterdir()) == [path.name]


def test_a_registry_folder_of_another_user_or_a_symlink_is_refused(temp: Path) -> None:
    elsewhere = temp / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    registry_folder().symlink_to(elsewhere)
    with bystander() as sleeper:
        (elsewhere / f"{sleeper.pid}.json").write_text(
            json.dumps({"pgid": sleeper.pid, "owner": dead_owner(),
                        "leader": leader_fields(sleeper.pid), "token": "x"}), "utf-8"
        )  # fmt: skip
        lines = clean_up()
        assert survives(sleeper)
        assert lines == [line for line in lines if "symlink" in line] and len(lines) == 1
        if os.geteuid() == 0:  # only root can give a folder away
            registry_folder().unlink()
            elsewhere.rename(registry_folder())
            os.chown(registry_folder(), 65534, 65534)
            lines = clean_up()
            assert survives(sleeper)
            assert len(lines) == 1 and "belongs to user id 65534" in lines[0], lines


# --- attack 3: groups 0 and 1, and autotune's own --------------------------------------


REPAIR_IN_ITS_OWN_SESSION = """
import json, os, sys
real_killpg = os.killpg
def killpg(pgid, sig):
    # A safety net for the machine, not part of the check: group 1 is init's.
    if pgid == 1:
        print("SIGNALLED GROUP 1", flush=True)
        return
    real_killpg(pgid, sig)
os.killpg = killpg
from autotune.engines.leftovers import clean_up
for line in clean_up():
    print(line, flush=True)
print("survived", flush=True)
"""


def test_groups_0_and_1_and_our_own_are_never_signalled(temp: Path) -> None:
    for pgid in (0, 1, -1):
        write_entry(pgid, leader={"started": 0.0, "cmdline": ["x"]}, token="x")
    # Its own group, which the process started below will lead: an entry for it too.
    code = f"import time; time.sleep(0.5); exec({REPAIR_IN_ITS_OWN_SESSION!r})"
    own = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        start_new_session=True,  # if it ever signalled its own group, only it would die
    )  # fmt: skip
    write_entry(own.pid, leader=leader_fields(own.pid), token="x")
    out, err = own.communicate(timeout=60)
    assert own.returncode == 0, err  # not -9: it did not kill itself
    assert "SIGNALLED GROUP 1" not in out
    assert out.splitlines()[-1] == "survived"
    lines = out.splitlines()[:-1]
    assert len(lines) == 4, lines
    assert sum("is never signalled" in line for line in lines) == 3, lines
    assert sum("autotune's own" in line for line in lines) == 1, lines


# --- attack 4: scratch folders that are not provably ours --------------------------------


def test_only_a_marked_scratch_folder_inside_the_temp_folder_is_removed(
    temp: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside" / "autotune-server-keep"
    outside.mkdir(parents=True)
    (outside / "precious").write_text("x", "utf-8")
    (outside / MARKER).write_text("token-outside", "ascii")  # even with a marker
    unmarked = temp / "autotune-server-keep"
    unmarked.mkdir()
    (unmarked / "precious").write_text("x", "utf-8")
    other_token = make_scratch("autotune-server-")
    through_link = temp / "autotune-server-link"
    through_link.symlink_to(outside)
    ours = make_scratch("autotune-server-")
    cases = [
        (outside, "token-outside"),
        (unmarked, "any"),
        (other_token, "not-its-token"),
        (through_link, "token-outside"),
        (Path(tempfile.gettempdir()), "any"),
        (ours, (ours / MARKER).read_text("ascii")),
    ]
    pids = iter(range(4_000_000, 4_100_000))
    for folder, token in cases:
        pgid = next(pid for pid in pids if not psutil.pid_exists(pid))  # no live group
        write_entry(
            pgid, leader={"started": 0.0, "cmdline": ["x"]}, token="x",
            scratch={"path": str(folder), "token": token},
        )  # fmt: skip
    lines = clean_up()
    assert (outside / "precious").exists() and (unmarked / "precious").exists()
    assert other_token.exists() and through_link.is_symlink() and temp.exists()
    assert not ours.exists()
    assert len(lines) == 5 and all("in place" in line for line in lines), lines
    assert sum("outside the temporary folder" in line for line in lines) == 3, lines
    assert sum("no autotune marker" in line for line in lines) == 2, lines


def test_the_guard_run_by_hand_never_kills_whoever_started_it(tmp_path: Path) -> None:
    """The guard kills its own group when told to: run by hand, that group is its own, not
    the shell's."""
    shell = subprocess.Popen(
        ["sh", "-c", f"{' '.join(GUARD)} sleep 600 & echo $!; wait"],
        stdout=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True,
    )  # fmt: skip
    try:
        assert shell.stdout is not None
        guard = int(shell.stdout.readline())
        deadline = time.monotonic() + 30
        while os.getpgid(guard) == shell.pid and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1)  # and has set its handler, the line after
        os.kill(guard, signal.SIGUSR1)  # what its parent's death sends it
        assert shell.wait(timeout=30) == 0  # the shell's wait returned: it was not killed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)


def test_record_skips_groups_it_cannot_identify(temp: Path) -> None:
    record(0, ["x"])
    record(1, ["x"])
    record(os.getpgrp(), ["x"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    record(gone.pid, ["x"])
    assert not registry_folder().exists() or not list(registry_folder().iterdir())
    assert leftovers.registry_folder() == temp / f"autotune-processes-{os.getuid()}"
