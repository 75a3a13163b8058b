"""What a running study shows: a live line per trial on a terminal, plain lines elsewhere."""

from __future__ import annotations

import sys
import time

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.status import Status

from autotune.params import TrialConfig
from autotune.select import is_feasible, recommend


def _fmt(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def trial_figures(trial: FrozenTrial) -> str:
    """One line of a finished trial's key figures."""
    if trial.state != TrialState.COMPLETE:
        reason = trial.user_attrs.get("failure_reason") or trial.state.name.lower()
        return f"{trial.state.name}: {reason}"
    a = trial.user_attrs
    return (
        f"{_fmt(a.get('throughput_output_tokens_per_s'), '.1f')} tok/s, "
        f"p95 {_fmt(a.get('e2e_latency_p95_ms'), '.0f')} ms, "
        f"acc {_fmt(a.get('accuracy'), '.3f')}, "
        f"mem {_fmt(a.get('peak_memory_mib'), '.0f')} MiB"
        f"{'' if is_feasible(trial) else ' (infeasible)'}"
    )


class Progress:
    """Progress of a study on stderr; quiet live updates when stderr is not a terminal."""

    def __init__(self, *, total: int, quiet: bool = False) -> None:
        self.total = total
        self.quiet = quiet
        self.console = Console(stderr=True, highlight=False)
        self.live = self.console.is_terminal and not quiet
        self.done = 0
        self.status: Status | None = None
        self.current = ""
        self.trial_started_at = 0.0

    def start(self, *, done: int, study_name: str) -> None:
        self.done = done
        self.note(f"study '{study_name}': {done}/{self.total} trials finished")

    def note(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message, soft_wrap=True)

    def trial_started(self, number: int, config: TrialConfig) -> None:
        self.trial_started_at = time.monotonic()
        self.current = f"[{self.done + 1}/{self.total}] trial {number}"
        self.phase("starting")

    def phase(self, name: str) -> None:
        if not self.live:
            return
        text = f"{self.current}: {name}"
        if self.status is None:
            self.status = self.console.status(text)
            self.status.start()
        else:
            self.status.update(text)

    def _stop_status(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def trial_finished(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._stop_status()
        self.done += 1
        seconds = time.monotonic() - self.trial_started_at
        best = ""
        try:
            rec = recommend(study)
            if rec.feasible:
                best = f" | best: trial {rec.trial.number}"
        except Exception:  # no completed trial yet: nothing to show
            pass
        tag = " (reference)" if trial.user_attrs.get("is_reference") else ""
        self.note(
            f"[{self.done}/{self.total}] trial {trial.number}{tag} {seconds:.0f} s: "
            f"{trial_figures(trial)}{best}"
        )

    def finish(self, study: optuna.Study) -> None:
        self._stop_status()


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()
