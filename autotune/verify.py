"""`autotune verify`: relaunch a trial's deploy command, measure it again, compare.

The recommendation is a claim: "this command, on this machine, gives these figures". Verify
starts the very command `autotune export` prints (or measures `--endpoint`), re-measures
accuracy and speed with the study's own workload, and checks each figure against what the
trial recorded: accuracy may drop by at most the space's max_drop, and speed may be worse by at
most a relative tolerance. Better than recorded always passes.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from rich.console import Console
from rich.table import Table

from autotune.checkpoints.adapters import Adapter, stored_adapters
from autotune.checkpoints.source import study_model_path, study_quantized_paths
from autotune.engines.measurement import Measurement, measure_once
from autotune.errors import StudyError, TrialFailure
from autotune.evalset.dataset import load_evalset
from autotune.export.reproduce import reproduction
from autotune.measure.registry import METRICS
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.space import SearchSpace
from autotune.study.select import chosen_trial, deploy_target

DEFAULT_TOLERANCE = 0.25
THROUGHPUT = "throughput_output_tokens_per_s"

# Speed figures always checked; the study's own objectives are added to them.
CHECKED_SPEED = ("throughput_output_tokens_per_s", "e2e_latency_p50_ms", "e2e_latency_p95_ms")
# Shown for comparison, not judged: too small or too noisy on their own to fail a deploy.
SHOWN = ("ttft_p50_ms", "tpot_p50_ms", "throughput_requests_per_s", "startup_s", "peak_memory_mib")


@dataclass(frozen=True)
class Check:
    """One figure, recorded and re-measured; `passed` None means shown but not judged.

    For throughput, the two 95% intervals too, and whether the recorded one covers the new
    figure: a relaunch that lands outside it means the study's interval was too narrow.
    """

    metric: str
    recorded: float | None
    measured: float | None
    bound: float | None
    rule: str
    passed: bool | None
    recorded_interval: tuple[float, float] | None = None
    measured_interval: tuple[float, float] | None = None
    covered: bool | None = None


@dataclass
class VerifyResult:
    study: str
    trial: int
    target: str
    command: str
    exact: bool
    notes: list[str]
    checks: list[Check] = field(default_factory=list)
    failure: str | None = None
    log_tail: str = ""

    @property
    def passed(self) -> bool:
        return self.failure is None and all(c.passed is not False for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        return data


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not math.isnan(float(value)):
        return float(value)
    return None


def speed_check(metric: str, recorded: Any, measured: Any, tolerance: float) -> Check:
    """Measured may be worse than recorded by at most `tolerance` (relative); better passes."""
    rec, mes = _number(recorded), _number(measured)
    maximize = METRICS[metric].direction == "maximize"
    if rec is None or mes is None or rec == 0:
        return Check(metric, rec, mes, None, "not comparable", None)
    bound = rec * (1 - tolerance) if maximize else rec * (1 + tolerance)
    passed = mes >= bound if maximize else mes <= bound
    rule = f"{'>=' if maximize else '<='} recorded {'-' if maximize else '+'}{tolerance:.0%}"
    return Check(metric, rec, mes, bound, rule, passed)


def interval(figures: dict[str, Any]) -> tuple[float, float] | None:
    """The throughput's 95% interval from a trial's (or a measurement's) figures."""
    value, rel = _number(figures.get(THROUGHPUT)), _number(figures.get("throughput_ci_rel"))
    if value is None or rel is None or not math.isfinite(rel):
        return None
    return value * max(0.0, 1 - rel), value * (1 + rel)


def with_intervals(check: Check, recorded: dict[str, Any], measured: dict[str, Any]) -> Check:
    """`check` with both throughput intervals and whether the recorded one covers the new
    figure."""
    before, now = interval(recorded), interval(measured)
    covered = None
    if before is not None and check.measured is not None:
        covered = before[0] <= check.measured <= before[1]
    return replace(check, recorded_interval=before, measured_interval=now, covered=covered)


def accuracy_check(recorded: Any, measured: Any, max_drop: float) -> Check:
    rec, mes = _number(recorded), _number(measured)
    if rec is None or mes is None:
        return Check("accuracy", rec, mes, None, "not comparable", None)
    bound = rec - max_drop
    return Check("accuracy", rec, mes, bound, f">= recorded - {max_drop:g}", mes >= bound - 1e-12)


def compare(
    trial: FrozenTrial, m: Measurement, space: SearchSpace, tolerance: float
) -> list[Check]:
    recorded = TrialRecord.of(trial).model_dump()
    measured: dict[str, Any] = dict(m.figures)
    if m.accuracy is not None:
        measured["accuracy"] = m.accuracy.accuracy
    checks = [
        accuracy_check(
            recorded.get("accuracy"), measured.get("accuracy"), space.constraints.accuracy.max_drop
        )
    ]
    objectives = [o.metric for o in space.objectives]
    speed = [*CHECKED_SPEED, *(o for o in objectives if o not in CHECKED_SPEED)]
    for metric in speed:
        if metric in ("accuracy", "peak_memory_mib", "startup_s", "compile_s"):
            continue
        check = speed_check(metric, recorded.get(metric), measured.get(metric), tolerance)
        if metric == THROUGHPUT:
            check = with_intervals(check, recorded, measured)
        checks.append(check)
    budget = space.constraints.memory_budget_mib
    for metric in SHOWN:
        if metric in speed:
            continue
        rec, mes = _number(recorded.get(metric)), _number(measured.get(metric))
        if metric == "peak_memory_mib" and budget is not None and mes is not None:
            checks.append(Check(metric, rec, mes, budget, "<= memory budget", mes <= budget))
        else:
            checks.append(Check(metric, rec, mes, None, "shown only", None))
    return checks


def stored_space(study: optuna.Study) -> SearchSpace:
    data = StudyRecord.of(study).space
    if not data:
        raise StudyError(f"study '{study.study_name}' does not store its space; cannot verify")
    return SearchSpace.model_validate(data)


def verify_trial(
    study: optuna.Study,
    *,
    trial_number: int | None = None,
    fmt: str | None = None,
    endpoint: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    on_phase: Callable[[str], None] | None = None,
    adapters: list[Adapter] | None = None,
) -> VerifyResult:
    """Re-measure the recommended (or a given) trial through its deploy command.

    `adapters` (from --adapter) replace the study's own, e.g. where their folders live
    elsewhere on this machine; the first must carry the name the trials measured.
    """
    trial = chosen_trial(study, trial_number)
    trial_record = TrialRecord.of(trial)
    config = trial_record.trial_config()
    space = stored_space(study)
    record = StudyRecord.of(study)
    if not record.evalset:
        raise StudyError(f"study '{study.study_name}' does not store its evaluation set")
    evalset = load_evalset(record.evalset)
    # A study measured through an endpoint is verified against that endpoint by default.
    endpoint = endpoint or record.endpoint
    target = None if endpoint else fmt or deploy_target(study) or "swift"
    result = VerifyResult(
        study=study.study_name,
        trial=trial.number,
        target=f"endpoint {endpoint}" if endpoint else f"{target} server",
        command="",
        exact=True,
        notes=[],
    )
    check = reproduction(trial_record, target)
    if not check.deployable:
        result.notes.append(
            f"trial {trial.number} is a what-if for {target} ({check.reason}); differences "
            "below may come from that"
        )
    try:
        m = measure_once(
            space,
            config,
            # A checkpoint recorded by another machine (or a deleted dummy) is found or rebuilt.
            model_path=study_model_path(record, device=space.device),
            evalset=evalset,
            endpoint=endpoint,
            server_format=target,
            image_geometry=record.image_geometry,
            measure_accuracy=not record.dummy_weights,
            on_phase=on_phase,
            adapters=_adapters(record, adapters),
            quantized_paths=study_quantized_paths(record, device=space.device),
        )
    except TrialFailure as failure:
        result.failure = f"{failure.kind}: {failure.reason}"
        result.log_tail = failure.log_tail
        return result
    result.command = m.environment.get("server_command", "")
    command_exact = m.environment.get("export_exact", "true") == "true"
    result.exact = command_exact and check.deployable
    if not command_exact:
        result.notes.append(
            f"the {target} command cannot express trial {trial.number} exactly (see `autotune "
            f"export --format {target}`); differences below may come from that"
        )
    if check.deployable and measured_in_process(trial):
        result.notes.append(
            f"trial {trial.number} was measured in-process ({config.backend}); this run adds "
            "the HTTP server's own overheads"
        )
    result.checks = compare(trial, m, space, tolerance)
    return result


def measured_in_process(trial: FrozenTrial) -> bool:
    return TrialRecord.of(trial).environment.get("runner", "inprocess") == "inprocess"


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def verify_text(result: VerifyResult) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=140, highlight=False)
    console.print(f"verify: study '{result.study}', trial {result.trial}, via {result.target}")
    if result.command:
        # One unwrapped line, so it can be copied back into a shell.
        console.print(f"  relaunched: {result.command}", markup=False, soft_wrap=True)
    for note in result.notes:
        console.print(f"  note: {note}")
    if result.failure is not None:
        console.print(f"FAIL: the relaunch did not complete: {result.failure}")
        if result.log_tail:
            console.print("  last lines of the server log:")
            for line in result.log_tail.rstrip().splitlines()[-15:]:
                console.print(f"    {line}", markup=False)
        return buffer.getvalue().rstrip()
    table = Table(title_justify="left")
    for header in ("metric", "recorded", "measured", "change", "required", "result"):
        table.add_column(header)
    for c in result.checks:
        change = (
            f"{(c.measured - c.recorded) / c.recorded:+.0%}"
            if c.recorded and c.measured is not None
            else "-"
        )
        required = f"{c.rule} ({_cell(c.bound)})" if c.bound is not None else c.rule
        verdict = "-" if c.passed is None else ("ok" if c.passed else "FAIL")
        table.add_row(c.metric, _cell(c.recorded), _cell(c.measured), change, required, verdict)
    console.print(table)
    for c in result.checks:
        if c.recorded_interval is None or c.covered is None:
            continue
        low, high = c.recorded_interval
        where = "inside" if c.covered else "OUTSIDE"
        console.print(
            f"{c.metric}: the new figure {_cell(c.measured)} is {where} the study's 95% interval "
            f"[{_cell(low)}, {_cell(high)}]"
            + (
                f"; its own interval is [{_cell(c.measured_interval[0])}, "
                f"{_cell(c.measured_interval[1])}]"
                if c.measured_interval is not None
                else ""
            )
        )
    failed = [c.metric for c in result.checks if c.passed is False]
    console.print("PASS" if not failed else f"FAIL: {', '.join(failed)} outside tolerance")
    return buffer.getvalue().rstrip()


def _adapters(study: StudyRecord, given: list[Adapter] | None) -> list[Adapter]:
    stored = stored_adapters(study)
    if not given:
        return stored
    if stored and given[0].name != stored[0].name:
        raise StudyError(
            f"--adapter {given[0].name}: the study measured adapter '{stored[0].name}'; give "
            "that name first"
        )
    return given
