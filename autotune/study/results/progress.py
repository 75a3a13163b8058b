"""What a running study shows: a progress bar on a terminal, plain lines elsewhere.

On a terminal: one bar over the trials with the running trial's phase (loading, warm-up,
screening, load test, accuracy, starting server) and the best feasible trial so far; each
finished trial leaves one line with its key figures above the bar. When stderr is not a
terminal (CI, a log file) those lines are written plainly, with one line per phase of the
running trial in between, and no control codes.
"""

from __future__ import annotations

import math
import time
from types import TracebackType

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichProgress

from autotune.accuracy.timed import TIMED_ITEMS
from autotune.params import TrialConfig
from autotune.records.stored import TrialRecord
from autotune.study.results.counting import (
    FAILURE_WORDS,
    SURPLUS,
    counts_towards_target,
    trial_counts,
)
from autotune.study.results.gain import baseline_trial, gain_over_baseline
from autotune.study.results.provenance import provenance, reference_config
from autotune.study.results.select import NoDeployableTrial, is_feasible, recommend
from autotune.study.results.timeshare import study_time_share, trial_parts

# A log shows the running estimate at most this often (a terminal's bar, as it comes).
PLAIN_ESTIMATE_EVERY_S = 30.0

__all__ = ["SURPLUS", "Progress", "best_so_far", "time_line", "trial_figures"]


def _fmt(value: object, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def trial_figures(trial: FrozenTrial) -> str:
    """One line of a finished trial's key figures."""
    if trial.state != TrialState.COMPLETE:
        failed = TrialRecord.of(trial)
        reason = failed.failure_reason or trial.state.name.lower()
        if failed.raced_reason:
            return failed.raced_reason
        kind = failed.failure_kind
        if kind == "oom" or (kind is not None and trial.state == TrialState.PRUNED):
            # Out of memory, or a launch that did not start: recorded as PRUNED so that the
            # sampler learns from it (objective.fail_trial); a failure all the same.
            words = FAILURE_WORDS.get(kind, kind)
            return f"FAIL ({words}; the sampler now avoids this region): {reason}"
        return f"{trial.state.name}: {reason}"
    a = TrialRecord.of(trial)
    ci = a.figure("throughput_ci_rel")
    interval = f" ±{ci:.1%}" if ci is not None and math.isfinite(ci) else ""
    reasons = a.infeasible_because or []
    tags = "" if is_feasible(trial) else f" (infeasible: {'; '.join(reasons) or 'see best'})"
    if a.deployable is False:
        tags += " (what-if)"
    timed = a.figure(TIMED_ITEMS)
    accuracy = _fmt(a.figure("accuracy"), ".3f")
    if timed is not None:  # dummy weights (autotune.accuracy.timed)
        accuracy = f"timed, not judged ({timed:.0f} items)"
    if a.accuracy_not_judged is not None:  # its answers could not change the recommendation
        accuracy = "not judged"
    if a.confirmation_skipped is not None:  # the floor passed it; slower than a confirmed one
        accuracy = f"{accuracy} ({a.confirmation_skipped.line()})"
    return (
        f"{_fmt(a.figure('throughput_output_tokens_per_s'), '.1f')}{interval} tok/s"
        f"{measuring_caveat(a)}, p95 {_fmt(a.figure('e2e_latency_p95_ms'), '.0f')} ms, "
        f"acc {accuracy}, mem {_fmt(a.figure('peak_memory_mib'), '.0f')} MiB{tags}"
    )


def measuring_caveat(record: TrialRecord) -> str:
    """' (cap reached)' or ' (never settled)' where a load test ended before it knew its rate;
    the first figure's looser interval says why it is looser, and a context-only reference
    too short for a window that its rate has no interval (autotune.measure.summary)."""
    if record.figure("throughput_window") == 0.0:
        return " (no interval: too short for a steady window, read after its first request)"
    if record.figure("warmup_settled") == 0.0:
        return " (rate never settled)"
    if record.measure_stop_reason in ("max_seconds", "max_requests"):
        return " (measuring cap reached)"
    if record.first_figure:
        return " (the first figure, measured to a looser interval: the steps race it)"
    return ""


def time_line(trial: FrozenTrial) -> str:
    """Where one trial's seconds went: '(start-up 61 s, warm-up 3 s, measuring 12 s, ...)'."""
    record = TrialRecord.of(trial)
    seconds = trial_parts(record)
    parts = [
        f"{name} {seconds[key]:.0f} s"
        for key, name in (
            ("startup", "start-up"),
            ("warmup", "warm-up"),
            ("screening", "screening"),
            ("measuring", "measuring"),
            ("accuracy", "accuracy"),
            ("recording", "recording"),
        )
        # Screening and recording are short where they are not the story: shown from 1 s.
        if seconds[key] and (key not in ("screening", "recording") or seconds[key] >= 0.5)
    ]
    launch = record.launch_id
    if launch is not None:
        how = "new launch" if record.launch_started else "reused launch"
        beside = ", started beside the reference" if record.started_beside else ""
        parts.append(f"{how} {launch}{beside}")
    if record.measured_beside is not None:
        parts.append(f"measured beside {record.measured_beside}")
    return f" ({', '.join(parts)})" if parts else ""


def best_so_far(study: optuna.Study) -> str:
    """'best: trial N (figures)' for the recommended feasible trial, or '' when none yet; its
    gain over the deploy target's defaults once they are measured."""
    try:
        rec = recommend(study)
    except NoDeployableTrial:
        return "no deployable trial yet"
    except Exception:  # no completed trial yet: nothing to show
        return ""
    if not rec.feasible:
        return "no feasible trial yet"
    a = TrialRecord.of(rec.trial)
    gain = gain_over_baseline(rec.trial, baseline_trial(study))
    return (
        f"best: trial {rec.trial.number} "
        f"({_fmt(a.figure('throughput_output_tokens_per_s'), '.1f')} tok/s, "
        f"p95 {_fmt(a.figure('e2e_latency_p95_ms'), '.0f')} ms"
        f"{', ' + gain.words() if gain is not None else ''})"
    )


def _uncounted_prefix(record: TrialRecord) -> str:
    """What a trial that --trials does not count is, in the place of its [k/N]."""
    if record.duplicate_of is not None:
        return "[repeat, not counted]"
    return "[failed, not counted]"


class Progress:
    """Progress of a study on stderr; a live bar only when stderr is a terminal.

    Use as a context manager (or call `finish`) so an interrupted run restores the terminal.
    """

    def __init__(
        self,
        *,
        total: int,
        quiet: bool = False,
        console: Console | None = None,
        live: bool = True,
    ) -> None:
        """`live`: a bar when on a terminal; False where lines come from several workers."""
        self.total = total
        self.quiet = quiet
        self.console = console or Console(stderr=True, highlight=False)
        self.live = live and self.console.is_terminal and not quiet
        self.done = 0
        self.bar: RichProgress | None = None
        self.task: TaskID | None = None
        self.current = ""
        self.trial_started_at = 0.0
        self.next_plain_estimate_s = PLAIN_ESTIMATE_EVERY_S
        # The reference's configuration, once the study has one: each line names what differs.
        self.reference: dict[str, object] | None = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop_bar()

    def start(self, *, done: int, study_name: str) -> None:
        self.done = done
        self.note(f"study '{study_name}': {done}/{self.total} trials finished")
        if self.live and self.bar is None:
            self.bar = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(bar_width=30),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[best]}"),
                console=self.console,
                transient=True,  # the per-trial lines stay, the bar goes when the study ends
            )
            self.bar.start()
            self.task = self.bar.add_task(
                "waiting", total=self.total, completed=min(done, self.total), best=""
            )

    def note(self, message: str) -> None:
        if not self.quiet:
            # With a live bar, rich prints this above it. No markup: a message may quote
            # brackets ("[worker 1]", a path) that rich would take for style tags.
            self._print(message, markup=False)

    def _print(self, message: str, *, markup: bool | None = None) -> None:
        """A line for the reader, if there still is one: a worker whose coordinator was killed
        writes into a pipe nobody reads, and a BrokenPipeError raised here would replace the
        Ctrl-C or failure its trial is recording (the trial would end without its reason)."""
        try:
            self.console.print(message, soft_wrap=True, markup=markup)
        except (BrokenPipeError, ConnectionResetError):
            self.quiet = True

    def trial_started(self, number: int, config: TrialConfig) -> None:
        self.trial_started_at = time.monotonic()
        self.current = f"trial {number}"
        self.next_plain_estimate_s = PLAIN_ESTIMATE_EVERY_S
        self.phase("starting")

    def phase(self, name: str) -> None:
        if self.bar is None or self.task is None:
            # No live bar (a log file, CI): one plain line per phase, so the log of a long GPU
            # trial shows where it is (start-up, warm-up, load test, accuracy).
            if not self.quiet and self.current:
                elapsed = time.monotonic() - self.trial_started_at
                self._print(f"  {self.current}: {name} ({elapsed:.0f} s)")
            return
        self.bar.update(self.task, description=f"{self.current}: {name}")
        self.bar.refresh()

    def estimate(self, entry: dict[str, object]) -> None:
        """The running trial's estimate so far (autotune.study.results.live): on the bar as it
        comes; in a log, a line every PLAIN_ESTIMATE_EVERY_S of load, so a long GPU trial shows
        where its rate stands without a line every few seconds."""
        rate, ci, elapsed = entry.get("tokens_per_s"), entry.get("ci_rel"), entry.get("elapsed_s")
        interval = f" ±{ci:.1%}" if isinstance(ci, float) and math.isfinite(ci) else ""
        seconds = elapsed if isinstance(elapsed, int | float) else 0.0
        text = f"load test {seconds:.0f} s: {_fmt(rate, '.1f')}{interval} tok/s so far"
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, description=f"{self.current}: {text}")
            self.bar.refresh()
        elif not self.quiet and self.current and seconds >= self.next_plain_estimate_s:
            self.next_plain_estimate_s = seconds + PLAIN_ESTIMATE_EVERY_S
            self._print(f"  {self.current}: {text}")

    def trial_finished(
        self, study: optuna.Study, trial: FrozenTrial, *, counted: int | None = None
    ) -> None:
        # Failed trials and repeated proposals do not count towards --trials: their lines say
        # so instead of repeating the count of the trial before.
        counts = counts_towards_target(trial)
        self.done = counted if counted is not None else self.done + int(counts)
        record = TrialRecord.of(trial)
        if record.failure_kind == SURPLUS:
            self.note(f"trial {trial.number} not run: {record.failure_reason}")
            return
        seconds = time.monotonic() - self.trial_started_at
        best = best_so_far(study)
        if self.reference is None:
            self.reference = reference_config(study.get_trials(deepcopy=False))
        tag = f" ({provenance(record, self.reference)})"
        if record.duplicate_of is not None:
            tag = f" (same configuration as trial {record.duplicate_of}, not re-run)"
        prefix = f"[{self.done}/{self.total}]" if counts else _uncounted_prefix(record)
        self.note(
            f"{prefix} trial {trial.number}{tag} {seconds:.0f} s"
            f"{time_line(trial)}: {trial_figures(trial)}{' | ' + best if best else ''}"
        )
        if self.bar is not None and self.task is not None:
            self.bar.update(
                self.task,
                completed=min(self.done, self.total),
                description="next trial",
                best=best,
            )
            self.bar.refresh()

    def _stop_bar(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
            self.task = None

    def finish(self, study: optuna.Study) -> None:
        """The study's closing lines: what its trials counted for and where its time went."""
        if not self.quiet:
            self.note(trial_counts(study).line())
            self.note(f"time: {study_time_share(study).line()}")
        self._stop_bar()
