"""`autotune run --gpus 0,1`: one worker process per GPU, all sharing one study.

The coordinator prepares the study once (repairs, the reference and the candidates queued),
then starts one `autotune run` worker per GPU on the same storage and trial target. Each
worker runs Optuna's own optimize loop; its launches take their GPUs from the host's pool
(autotune.engines.gpu_pool), so a tensor-parallel launch gets a disjoint set. Workers run in
their own process group: Ctrl-C reaches the coordinator, which hands it on to each worker
once, so every worker marks its trial interrupted and stops its engine. A worker that dies
(killed, crashed) has its running trial failed at once with the reason; its GPU locks go
with it, and the other workers go on. A killed coordinator takes its workers with it
(parent-death signal).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import optuna

from autotune.engines.guard import parent_death_signal
from autotune.engines.threads import ENGINES_AT_ONCE_ENV
from autotune.errors import StudyError
from autotune.study.plan import StudyPlan
from autotune.study.results.progress import Progress
from autotune.study.run.budget import start_fits
from autotune.study.start.opening import prepare_study
from autotune.study.store.recovery import fail_orphaned
from autotune.study.store.storage import load_study

# How long workers get to stop their engines and record their trials after Ctrl-C.
STOP_GRACE_S = 60.0
POLL_S = 0.5


def _interrupt_when_parent_dies() -> None:  # runs in the worker, before it starts
    """SIGINT (a clean stop: trial marked interrupted, engine stopped) when the coordinator
    dies."""
    parent_death_signal(signal.SIGINT)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


@dataclass
class Worker:
    slot: int
    proc: subprocess.Popen[str]
    reader: threading.Thread | None = None
    code: int | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"worker {self.slot}"


class Coordinator:
    """Starts the workers, relays their lines, and accounts for every one that ends."""

    def __init__(self, plan: StudyPlan, worker_args: list[str], progress: Progress) -> None:
        self.plan = plan
        self.worker_args = worker_args
        self.progress = progress
        self.workers: list[Worker] = []

    def _start(self, slot: int) -> Worker:
        argv = [sys.executable, "-m", "autotune.cli", "run", *self.worker_args]
        argv += ["--worker", str(slot)]
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            # Each worker's engine sizes its CPU threads for a share of the cores.
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                ENGINES_AT_ONCE_ENV: str(self.plan.workers),
            },
            start_new_session=True,  # Ctrl-C goes to the coordinator, which hands it on
            preexec_fn=_interrupt_when_parent_dies,
        )
        worker = Worker(slot=slot, proc=proc)
        worker.reader = threading.Thread(target=self._relay, args=(worker,), daemon=True)
        worker.reader.start()
        return worker

    def _relay(self, worker: Worker) -> None:
        assert worker.proc.stdout is not None
        for line in worker.proc.stdout:
            text = line.rstrip("\n")
            worker.lines.append(text)
            self.progress.note(f"[{worker.name}] {text}")

    def run(self) -> None:
        """Until every worker has ended; StudyError when none of them ended well."""
        count = self.plan.workers
        gpus = ", ".join(str(gpu.index) for gpu in self.plan.gpus)
        self.progress.note(f"{count} workers share the study, their launches on GPUs {gpus}")
        self.workers = [self._start(slot) for slot in range(count)]
        try:
            self._wait()
        except KeyboardInterrupt:
            self._stop_all()
            raise
        if all(worker.code not in (0, None) for worker in self.workers):
            raise StudyError(
                "every worker stopped with an error (their lines above say why); fix the "
                "cause and run the same command again"
            )

    def _wait(self) -> None:
        running = list(self.workers)
        while running:
            time.sleep(POLL_S)
            for worker in list(running):
                code = worker.proc.poll()
                if code is None:
                    continue
                if worker.reader is not None:
                    worker.reader.join(timeout=5)
                worker.code = code
                running.remove(worker)
                if code != 0:
                    self._lost(worker, others=len(running))

    def _lost(self, worker: Worker, *, others: int) -> None:
        """A worker ended badly: fail the trial it left RUNNING, say so, go on."""
        how = describe_exit(worker.code or 0)
        study = load_study(self.plan.study_name, self.plan.storage_url)
        notes = fail_orphaned(study, why={worker.proc.pid: f"its worker {how}"})
        after = f"; {others} other worker(s) go on" if others else ""
        self.progress.note(f"{worker.name} (pid {worker.proc.pid}) {how}; its GPUs are free{after}")
        for note in notes:
            self.progress.note(note)

    def _stop_all(self) -> None:
        """After Ctrl-C: one SIGINT to each worker, a grace period, then SIGKILL."""
        alive = [w for w in self.workers if w.proc.poll() is None]
        for worker in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.proc.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        for worker in alive:
            try:
                worker.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.proc.kill()  # its engines' guards take them down with it
                worker.proc.wait()
            except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
                worker.proc.kill()
                worker.proc.wait()
        study = load_study(self.plan.study_name, self.plan.storage_url)
        for note in fail_orphaned(study, why={w.proc.pid: "interrupted" for w in alive}):
            self.progress.note(note)


def run_on_workers(
    plan: StudyPlan, worker_args: list[str], *, target: int, progress: Progress
) -> optuna.Study:
    """Prepare the study, run it on one worker per GPU, then summarise it."""
    if prepare_study(plan, target, progress, fits=start_fits(plan, progress)) is not None:
        Coordinator(plan, worker_args, progress).run()
        progress.finish(load_study(plan.study_name, plan.storage_url))
    return load_study(plan.study_name, plan.storage_url)
