"""`autotune run --gpus`: one worker per GPU sharing a study, with real processes.

The host's GPUs are faked through AUTOTUNE_FAKE_GPUS (autotune.engines.gpus); everything
else is real: the coordinator, its worker processes, the engines they start (the tiny model
in-process, on the CPU), the journal file they share and the GPU lock files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import optuna
import psutil
import pytest
from optuna.trial import FrozenTrial, TrialState
from small_space import autotune_cli, small_space

from autotune.study.store.storage import open_storage

pytestmark = pytest.mark.slow

PARAMS = {
    "image_max_side": {"choices": [None, 256, 128, 64]},
    "batch_size": {"choices": [1, 2]},
    "repetition_penalty": {"choices": [1.0, 1.05]},
}


def fake_gpus_env(spec: str, tmp_path: Path) -> dict[str, str]:
    # A private temporary folder: the GPU lock files of this test are its own.
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    # One compute thread per worker: two workers' engines at once would otherwise run four
    # spinning threads on a 2-core machine (slower by far; no figure is compared here).
    threads = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return {**os.environ, **threads, "AUTOTUNE_FAKE_GPUS": spec, "TMPDIR": str(tmp)}


def load(path: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_storage(str(path), create=False))


def counted(study: optuna.Study) -> list[FrozenTrial]:
    return [
        t
        for t in study.trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
        and "duplicate_of" not in t.user_attrs
        and "failure_kind" not in t.user_attrs
    ]


def assert_gpus_never_shared(trials: list[FrozenTrial]) -> None:
    """Two workers' trials never ran on one GPU at the same time."""
    spans = [
        (
            t.user_attrs["owner"]["pid"],
            gpu["index"],
            t.datetime_start or datetime.min,
            t.datetime_complete or datetime.max,
        )
        for t in trials
        for gpu in t.user_attrs.get("gpus", [])
    ]
    for pid, gpu, start, end in spans:
        for other_pid, other_gpu, other_start, other_end in spans:
            if pid != other_pid and gpu == other_gpu:
                assert end <= other_start or other_end <= start, (pid, other_pid, gpu)


def test_two_workers_share_one_journal_study_and_stop_at_the_target(tmp_path: Path) -> None:
    space = small_space(tmp_path, trials=6, params=PARAMS)
    env = fake_gpus_env("2", tmp_path)
    result = autotune_cli(
        "run", "--space", str(space), "--study", "mg", "--gpus", "all", cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    journal = tmp_path / "studies" / "mg.journal"
    assert journal.is_file() and not (tmp_path / "studies" / "mg.db").exists()
    assert "2 workers share the study" in result.stderr
    assert "[worker 0]" in result.stderr and "[worker 1]" in result.stderr
    study = load(journal, "mg")
    measured = counted(study)
    # Exactly the target: a trial asked for at the same moment as another steps back.
    assert len(measured) == 6
    assert all(t.state != TrialState.RUNNING for t in study.trials)
    surplus = [t for t in study.trials if t.user_attrs.get("failure_kind") == "surplus"]
    assert len(study.trials) == 6 + len(surplus) + sum(
        "duplicate_of" in t.user_attrs for t in study.trials
    )
    # Both workers measured, each trial on one GPU of its own, never a GPU shared at once.
    assert len({t.user_attrs["owner"]["pid"] for t in measured}) == 2
    # Each records its worker's slot, by which their confirmations' levels interleave.
    slots = {t.user_attrs["owner"]["pid"]: t.user_attrs["owner"]["worker"] for t in measured}
    assert sorted(slots.values()) == [0, 1]
    assert all(len(t.user_attrs["gpus"]) == 1 for t in measured)
    assert {t.user_attrs["gpus"][0]["index"] for t in measured} <= {0, 1}
    assert all(t.user_attrs["gpu_share"] == 0.5 for t in measured)
    assert_gpus_never_shared(measured)
    # No configuration was measured twice.
    configs = [json.dumps(t.user_attrs["config"], sort_keys=True) for t in measured]
    assert len(set(configs)) == len(configs)
    # The reading commands find the journal by the study's name.
    best = autotune_cli("best", "--study", "mg", "--json", cwd=tmp_path, env=env)
    assert best.returncode == 0, best.stderr
    assert json.loads(best.stdout)["recommended"]["gpus"][0]["name"] == "fake GPU"


def _running_trials(journal: Path) -> list[FrozenTrial]:
    if not journal.is_file():
        return []
    try:
        study = load(journal, "kill")
    except Exception:  # the study is being created
        return []
    return study.get_trials(states=(TrialState.RUNNING,))


def test_killing_one_worker_fails_its_trial_while_the_other_finishes(tmp_path: Path) -> None:
    space = small_space(tmp_path, trials=7, params=PARAMS)
    journal = tmp_path / "studies" / "kill.journal"
    coordinator = _start_coordinator(tmp_path, space, "kill", gpus="0,1")
    victim = None
    deadline = time.monotonic() + 600
    while victim is None and time.monotonic() < deadline and coordinator.poll() is None:
        running = _running_trials(journal)
        # Wait until both workers are measuring, then kill one in the middle of its trial.
        if len({t.user_attrs.get("owner", {}).get("pid") for t in running} - {None}) == 2:
            victim = next(t for t in running if not t.user_attrs.get("is_reference"))
        time.sleep(0.3)
    assert victim is not None, "both workers never ran a trial at once"
    victim_pid = int(victim.user_attrs["owner"]["pid"])
    doomed = [victim_pid, *(p.pid for p in psutil.Process(victim_pid).children(recursive=True))]
    os.kill(victim_pid, signal.SIGKILL)
    _, stderr = coordinator.communicate(timeout=900)
    assert coordinator.returncode == 0, stderr[-3000:]
    assert f"(pid {victim_pid}) killed by SIGKILL" in stderr
    study = load(journal, "kill")
    killed = study.trials[victim.number]
    assert killed.state == TrialState.FAIL
    assert killed.user_attrs["failure_kind"] == "orphaned"
    assert "its worker killed by SIGKILL" in killed.user_attrs["failure_reason"]
    # The other worker carried the study to its target alone.
    measured = counted(study)
    assert len(measured) == 7
    after = [t for t in measured if t.number > victim.number]
    assert after and all(t.user_attrs["owner"]["pid"] != victim_pid for t in after)
    assert not any(t.state == TrialState.RUNNING for t in study.trials)
    # Nothing of the killed worker is left: its engine died with it.
    time.sleep(1)
    assert not [pid for pid in doomed if psutil.pid_exists(pid)
                and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]  # fmt: skip


POOL_CLIENT = """
import json, sys, time
from pathlib import Path
from autotune.engines.gpus import detect_gpus
from autotune.engines.gpu_pool import GpuPool
count, out = int(sys.argv[1]), Path(sys.argv[2])
pool = GpuPool(detect_gpus(), folder=Path(sys.argv[3]))
for _ in range(3):
    lease = pool.acquire(count)
    start = time.time()
    time.sleep(0.4)
    record = {"gpus": [g.index for g in lease.gpus], "start": start, "end": time.time()}
    lease.release()
    with out.open("a") as f:
        f.write(json.dumps(record) + "\\n")
"""


def test_gpu_pool_hands_out_disjoint_sets_across_processes(tmp_path: Path) -> None:
    """A tensor-parallel launch (2 GPUs) and two single-GPU ones, in three processes."""
    env = fake_gpus_env("2", tmp_path)
    locks = tmp_path / "locks"
    locks.mkdir()
    outputs = [tmp_path / f"out{i}.jsonl" for i in range(3)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", POOL_CLIENT, str(count), str(out), str(locks)], env=env
        )
        for count, out in zip((2, 1, 1), outputs, strict=True)
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    held = [json.loads(line) for out in outputs for line in out.read_text().splitlines()]
    assert len(held) == 9
    assert sum(len(h["gpus"]) == 2 for h in held) == 3
    for a in held:
        for b in held:
            if a is not b and set(a["gpus"]) & set(b["gpus"]):
                assert a["end"] <= b["start"] or b["end"] <= a["start"], (a, b)


def test_a_dead_holder_frees_its_gpus(tmp_path: Path) -> None:
    env = fake_gpus_env("1", tmp_path)
    locks = tmp_path / "locks"
    locks.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from autotune.engines.gpus import detect_gpus; "
            "from autotune.engines.gpu_pool import GpuPool; "
            "lease = GpuPool(detect_gpus(), folder=Path(sys.argv[1])).acquire(1); "
            "print('held', flush=True); time.sleep(600)",
            str(locks),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    taker = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from autotune.engines.gpus import detect_gpus; "
            "from autotune.engines.gpu_pool import GpuPool; "
            "print(GpuPool(detect_gpus(), folder=Path(sys.argv[1])).acquire(1).gpus[0].index)",
            str(locks),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert taker.returncode == 0 and taker.stdout.strip() == "0", taker.stderr


def _start_coordinator(
    tmp_path: Path, space: Path, study: str, *, gpus: str = "all"
) -> subprocess.Popen[str]:
    """`autotune run --gpus` on two faked GPUs, its output piped."""
    argv = ["run", "--space", str(space), "--study", study, "--gpus", gpus]
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", *argv],
        cwd=tmp_path,
        env=fake_gpus_env("2", tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_two_running(coordinator: subprocess.Popen[str], journal: Path, name: str) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and coordinator.poll() is None:
        if not journal.is_file():
            time.sleep(0.3)
            continue
        try:
            running = load(journal, name).get_trials(states=(TrialState.RUNNING,))
        except Exception:  # the study is being created
            running = []
        if len({t.user_attrs.get("owner", {}).get("pid") for t in running} - {None}) == 2:
            return
        time.sleep(0.3)
    raise AssertionError("both workers never ran a trial at once")


@pytest.mark.parametrize("how", ["ctrl-c", "coordinator-killed"])
def test_stopping_the_coordinator_stops_every_worker_cleanly(tmp_path: Path, how: str) -> None:
    """Ctrl-C (SIGINT to the coordinator), or the coordinator killed outright: every worker
    marks its trial interrupted and stops its engine; nothing stays RUNNING or alive."""
    space = small_space(tmp_path, trials=20, params=PARAMS)
    journal = tmp_path / "studies" / "stop.journal"
    coordinator = _start_coordinator(tmp_path, space, "stop")
    _wait_for_two_running(coordinator, journal, "stop")
    family = [p.pid for p in psutil.Process(coordinator.pid).children(recursive=True)]
    coordinator.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
    _, stderr = coordinator.communicate(timeout=120)
    if how == "ctrl-c":
        assert coordinator.returncode == 130, stderr[-3000:]
        assert "interrupted" in stderr and "Traceback" not in stderr
    deadline = time.monotonic() + 60
    alive = family
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [
            pid
            for pid in family
            if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        ]
    assert not alive, [psutil.Process(pid).cmdline() for pid in alive]
    study = load(journal, "stop")
    assert not study.get_trials(states=(TrialState.RUNNING,))
    stopped = [t for t in study.trials if t.user_attrs.get("failure_kind") == "interrupted"]
    assert len(stopped) == 2, [
        (t.number, t.state, t.user_attrs.get("failure_kind")) for t in study.trials
    ]
