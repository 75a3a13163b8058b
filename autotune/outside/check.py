"""`autotune verify --client NAME`: the relaunch measured by autotune and by an outside tool.

A user's own benchmark tool is the figure they will trust, so verify lets one measure the
same launch right after autotune's own load test: the same requests (autotune.outside.requests),
as many as the load test sent, the tool told to leave as many out for its warm-up, at the
trial's concurrency (or its open loop's rate). Both run on one launch, so their difference is
the clients' and not two launches'. The outside figure is shown beside the others, not judged:
verify's verdict stays the one on its own figures; a tool that could not measure is a failure.
"""

from __future__ import annotations

import io
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

import optuna
from rich.console import Console
from rich.table import Table

from autotune.engines.measurement import Measurement
from autotune.engines.scratch import make_scratch
from autotune.engines.session import MeasurePlan, Served
from autotune.errors import AutotuneError
from autotune.measure.registry import THROUGHPUT
from autotune.outside import guidellm
from autotune.outside.requests import common_fields, study_requests
from autotune.records.stored import TrialRecord
from autotune.study.results.select import chosen_trial
from autotune.verify import VerifyResult, stored_space, verify_trial
from autotune.verify_text import verify_text

CLIENTS = (guidellm.NAME,)

# At most this many requests: each carries its own encoded image, written to disk first.
MAX_REQUESTS = 2048

COMPARED = (THROUGHPUT, "e2e_latency_p50_ms", "e2e_latency_p95_ms", "ttft_p50_ms")


@dataclass
class OutsideRun:
    """What the outside tool was asked to send, and what it measured (or why it did not)."""

    client: str
    requests: int = 0
    warmup: int = 0
    concurrency: int | None = None
    rate_per_s: float | None = None
    figures: guidellm.OutsideFigures | None = None
    measured: dict[str, float] = field(default_factory=dict)  # autotune's, this launch
    failure: str | None = None


@dataclass
class CrossCheck:
    verify: VerifyResult
    outside: OutsideRun

    @property
    def passed(self) -> bool:
        return self.verify.passed and self.outside.failure is None

    def to_dict(self) -> dict[str, Any]:
        return {**self.verify.to_dict(), "outside": asdict(self.outside), "passed": self.passed}


def check_client(client: str) -> None:
    """One line when `client` is unknown or not installed, before anything is launched."""
    if client not in CLIENTS:
        raise AutotuneError(f"--client {client}: not one of {', '.join(CLIENTS)}")
    guidellm.check_installed()


def cross_check(
    study: optuna.Study, *, client: str, trial_number: int | None = None, **verify: Any
) -> CrossCheck:
    """verify_trial (its keyword arguments in `verify`) with `client` measuring the same
    launch after autotune's own load test."""
    check_client(client)
    trial = chosen_trial(study, trial_number)
    config = TrialRecord.of(trial).trial_config()
    timeout_s = stored_space(study).trial_timeout_s + 120  # the tool's own start-up besides
    run = OutsideRun(client=client)

    def measure_outside(served: Served | None, plan: MeasurePlan, m: Measurement) -> None:
        if served is None:
            run.failure = "the relaunch runs in a worker process, which no HTTP client reaches"
            return
        sent = int(m.figures.get("load_requests") or 0)
        run.requests = min(sent, MAX_REQUESTS)
        run.warmup = min(run.requests - 1, sent - int(m.figures.get("measured_requests") or 0))
        run.rate_per_s = plan.request_rate_per_s
        run.concurrency = config.batch_size if run.rate_per_s is None else None
        run.measured = {k: float(m.figures[k]) for k in COMPARED if k in m.figures}
        requests = study_requests(served, plan, config.image_max_side, run.requests)
        workdir = make_scratch("autotune-outside-")
        try:
            run.figures = guidellm.run(
                served,
                requests,
                fields=common_fields(served, requests),
                warmup=run.warmup,
                concurrency=config.batch_size,
                rate_per_s=run.rate_per_s,
                workdir=workdir,
                timeout_s=timeout_s,
            )
        except (guidellm.OutsideFailure, OSError) as failure:
            run.failure = str(failure)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    result = verify_trial(study, trial_number=trial.number, while_up=measure_outside, **verify)
    if result.failure is None and run.figures is None and run.failure is None:
        run.failure = "the relaunch ended before the outside client's turn"
    return CrossCheck(result, run)


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def cross_check_text(check: CrossCheck) -> str:
    """Verify's report, then the outside tool's figures beside autotune's for the same launch."""
    run, figures = check.outside, check.outside.figures
    buffer = io.StringIO()
    console = Console(file=buffer, width=140, highlight=False)
    console.print(verify_text(check.verify), markup=False, soft_wrap=True)
    if check.verify.failure is not None:
        return buffer.getvalue().rstrip()
    if figures is None:
        console.print(f"FAIL: {run.client} did not measure: {run.failure}", markup=False)
        return buffer.getvalue().rstrip()
    if run.concurrency:
        seen = "-" if figures.concurrency_seen is None else f"{figures.concurrency_seen:g}"
        load = f"at {figures.concurrency} in flight ({seen} at most seen)"
    else:
        load = f"at {run.rate_per_s:g} requests/s (Poisson arrivals)"
    console.print(
        f"outside client: {figures.tool} {figures.version} sent {figures.requests_sent} requests "
        f"({figures.requests_measured} measured, {figures.errored} errored) {load}; autotune's "
        f"load test sent {run.requests} on this launch ({run.warmup} warm-up) at "
        f"{run.concurrency or '-'} in flight",
        soft_wrap=True,
    )
    recorded = check.verify.checks
    table = Table(title_justify="left")
    for header in ("metric", "recorded", "autotune", figures.tool, f"{figures.tool} / autotune"):
        table.add_column(header)
    for metric in COMPARED:
        before = next((c.recorded for c in recorded if c.metric == metric), None)
        ours, theirs = run.measured.get(metric), getattr(figures, metric)
        ratio = f"{theirs / ours:.2f}x" if ours and theirs is not None else "-"
        table.add_row(metric, _cell(before), _cell(ours), _cell(theirs), ratio)
    console.print(table)
    console.print(
        "both clients time each request on the wall clock from its sending to its last token, "
        "on the same launch; the outside figure is shown, not judged",
        soft_wrap=True,
    )
    return buffer.getvalue().rstrip()
