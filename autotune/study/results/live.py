"""A trial's running estimate while it measures: on the progress line and in the storage.

Every few seconds the load test's stop rule shows what it sees (autotune.measure.convergence:
the rate so far, its interval, the batch means it rests on). The study writes it as the
trial's `running_estimate` user attribute, which optuna-dashboard shows on the running trial,
and, in a study of one objective, as Optuna intermediate values (step: whole seconds into the
load), which its intermediate-value plot draws; Optuna takes intermediate values from
single-objective studies only.

The estimate arrives on the load test's own event loop, where a write to a locked or remote
storage would stall the requests being timed. So it is handed to a thread of its own, and a
write that fails is dropped: the trial's final record is what counts, and it is written (and
spooled) apart from this.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable
from typing import Any

import optuna

from autotune.records.stored import TrialRecord
from autotune.records.writer import write_trial

# What the running estimate keeps of a stop-rule trail entry.
KEPT = ("elapsed_s", "tokens_per_s", "ci_rel", "batches", "window_s", "settled", "stop")
# How long the end of a trial waits for the last writes.
CLOSE_TIMEOUT_S = 10.0


class LiveEstimate:
    """Writes one trial's running estimates from a thread; `post` never blocks."""

    def __init__(self, trial: optuna.Trial, show: Callable[[dict[str, Any]], None]) -> None:
        """`show`: the progress line's view of an estimate (called on the caller's thread)."""
        self.trial = trial
        self.show = show
        self.single_objective = len(trial.study.directions) == 1
        self.last_step = -1
        self.dropped = 0  # writes the storage refused
        self._queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def post(self, entry: dict[str, Any]) -> None:
        kept = {key: entry[key] for key in KEPT if key in entry}
        if not isinstance(kept.get("tokens_per_s"), int | float):
            return  # before the rule has a rate: nothing to show
        self.show(kept)
        if self._thread is None:
            self._thread = threading.Thread(target=self._write, name="live-estimate", daemon=True)
            self._thread.start()
        self._queue.put(kept)

    def close(self) -> None:
        """Wait for the writes posted so far (up to CLOSE_TIMEOUT_S), then stop the thread:
        nothing may be written once the trial is told. A write still stuck in a locked
        storage after that is its last: the thread writes nothing more."""
        if self._thread is None:
            return
        self._queue.put(None)
        self._thread.join(timeout=CLOSE_TIMEOUT_S)
        self._closed.set()
        self._thread = None

    def _write(self) -> None:
        while (entry := self._queue.get()) is not None and not self._closed.is_set():
            try:
                write_trial(self.trial, TrialRecord.part(running_estimate=entry))
                if self.single_objective:
                    self._report(entry)
            except Exception:  # a locked or unreachable storage: this figure is not kept
                self.dropped += 1

    def _report(self, entry: dict[str, Any]) -> None:
        rate, elapsed = entry.get("tokens_per_s"), entry.get("elapsed_s")
        if not isinstance(elapsed, int | float) or not math.isfinite(float(rate or math.nan)):
            return
        # Optuna keeps one value a step: the stop entry can fall in the second of the last.
        step = max(int(elapsed), self.last_step + 1)
        self.trial.report(float(rate), step=step)  # type: ignore[arg-type]
        self.last_step = step
