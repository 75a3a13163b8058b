"""`autotune verify`: relaunch a trial's deploy command, measure it again, compare.

The recommendation is a claim: "this command, on this machine, gives these figures". Verify
starts the very command `autotune export` prints (or measures `--endpoint`), re-measures
accuracy and speed with the study's own workload, and checks each figure against what the
trial recorded. Each judged figure has a band: for throughput, the study's 95% interval widened
by a relative tolerance (of the recorded figure) on each side; for end-to-end latencies under a
closed loop, the same relative interval (the latency of a fixed number in flight goes as one
over the request rate) plus the tolerance, and under open-loop arrivals the figure
+-tolerance; for accuracy, +-the space's max_drop. Two-sided by default: a relaunch far faster
than recorded misses as surely as one far slower (the study's figures do not describe it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.checkpoints.adapters import Adapter, stored_adapters
from autotune.checkpoints.source import study_model_path, study_quantized_paths
from autotune.engines.conditions import clock_note, clock_of, load_change, load_of
from autotune.engines.measurement import Measurement, WhileUp, measure_once
from autotune.errors import StudyError, TrialFailure
from autotune.evalset.dataset import load_evalset
from autotune.export.reproduce import reproduction
from autotune.measure.registry import METRICS, THROUGHPUT
from autotune.records.machine import trial_machine
from autotune.records.parts import Environment
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.space import SearchSpace
from autotune.study.results.groups import machine_here
from autotune.study.results.select import chosen_trial, deploy_target

DEFAULT_TOLERANCE = 0.25

# Speed figures always checked; the study's own objectives are added to them.
CHECKED_SPEED = (THROUGHPUT, "e2e_latency_p50_ms", "e2e_latency_p95_ms")
# Shown for comparison, not judged: too small or too noisy on their own to fail a deploy.
SHOWN = ("ttft_p50_ms", "tpot_p50_ms", "throughput_requests_per_s", "startup_s", "peak_memory_mib")


TWO_SIDED = "two-sided"
ONE_SIDED = "one-sided"


@dataclass(frozen=True)
class Check:
    """One figure, recorded and re-measured; `passed` None means shown but not judged.

    A judged figure must land in [low, high] (None: no limit on that side); `miss` says on
    which side it left the band ("above" or "below"). For throughput, the two 95% intervals
    too, and whether the recorded one covers the new figure.
    """

    metric: str
    recorded: float | None
    measured: float | None
    low: float | None
    high: float | None
    rule: str
    passed: bool | None
    miss: str | None = None
    recorded_interval: tuple[float, float] | None = None
    measured_interval: tuple[float, float] | None = None
    covered: bool | None = None


def judged(
    metric: str, rec: float, mes: float, low: float | None, high: float | None, rule: str
) -> Check:
    """The check of a figure against its band [low, high]."""
    miss = "below" if low is not None and mes < low - 1e-12 else None
    if high is not None and mes > high + 1e-12:
        miss = "above"
    return Check(metric, rec, mes, low, high, rule, miss is None, miss)


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
    rule: str = TWO_SIDED
    tolerance: float = DEFAULT_TOLERANCE
    # Which clock timed the recorded figures and which timed this relaunch's.
    recorded_clock: str = ""
    measured_clock: str = ""
    # The load each side ran under (autotune.measure.cpu_load), by figure.
    recorded_load: dict[str, float] = field(default_factory=dict)
    measured_load: dict[str, float] = field(default_factory=dict)

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


def speed_check(
    metric: str,
    recorded: Any,
    measured: Any,
    tolerance: float,
    *,
    interval_rel: float | None = None,
    one_sided: bool = False,
) -> Check:
    """The figure must lie within the recorded one +-(its interval's relative half-width, if
    recorded, + `tolerance`). One-sided: only the worse side is a limit."""
    rec, mes = _number(recorded), _number(measured)
    maximize = METRICS[metric].direction == "maximize"
    if rec is None or mes is None or rec == 0:
        return Check(metric, rec, mes, None, None, "not comparable", None)
    rel = interval_rel if interval_rel is not None and math.isfinite(interval_rel) else 0.0
    spread = rel + tolerance
    low, high = max(0.0, rec * (1 - spread)), rec * (1 + spread)
    allowance = f"({rel:.1%} interval + {tolerance:.0%})" if rel else f"{tolerance:.0%}"
    if not one_sided:
        return judged(metric, rec, mes, low, high, f"recorded ±{allowance}")
    if maximize:
        return judged(metric, rec, mes, low, None, f"recorded -{allowance} or more")
    return judged(metric, rec, mes, None, high, f"recorded +{allowance} or less")


# A trial's or a measurement's figures, read by name (None: not recorded).
Figures = Callable[[str], Any]


def interval(figure: Figures) -> tuple[float, float] | None:
    """The throughput's 95% interval from a trial's (or a measurement's) figures, by name."""
    value, rel = _number(figure(THROUGHPUT)), _number(figure("throughput_ci_rel"))
    if value is None or rel is None or not math.isfinite(rel):
        return None
    return value * max(0.0, 1 - rel), value * (1 + rel)


def with_intervals(check: Check, recorded: Figures, measured: Figures) -> Check:
    """`check` with both throughput intervals (from each side's figures, by name) and whether
    the recorded one covers the new figure."""
    before, now = interval(recorded), interval(measured)
    covered = None
    if before is not None and check.measured is not None:
        covered = before[0] <= check.measured <= before[1]
    return replace(check, recorded_interval=before, measured_interval=now, covered=covered)


def accuracy_check(
    recorded: Any, measured: Any, max_drop: float, *, one_sided: bool = False
) -> Check:
    """Accuracy within the recorded one +-max_drop; one-sided, at most max_drop lower."""
    rec, mes = _number(recorded), _number(measured)
    if rec is None or mes is None:
        return Check("accuracy", rec, mes, None, None, "not comparable", None)
    low = rec - max_drop
    if one_sided:
        return judged("accuracy", rec, mes, low, None, f"recorded -{max_drop:g} or more")
    return judged("accuracy", rec, mes, low, rec + max_drop, f"recorded ±{max_drop:g}")


def compare(
    trial: FrozenTrial,
    m: Measurement,
    space: SearchSpace,
    tolerance: float,
    *,
    one_sided: bool = False,
) -> list[Check]:
    record = TrialRecord.of(trial)
    measured: dict[str, Any] = dict(m.figures)
    accuracy = None if m.accuracy is None else m.accuracy.accuracy
    max_drop = space.constraints.accuracy.max_drop
    checks = [accuracy_check(record.accuracy, accuracy, max_drop, one_sided=one_sided)]
    recorded_rel = _number(record.figure("throughput_ci_rel"))
    objectives = [o.metric for o in space.objectives]
    speed = [*CHECKED_SPEED, *(o for o in objectives if o not in CHECKED_SPEED)]
    for metric in speed:
        if metric in ("accuracy", "peak_memory_mib", "startup_s", "compile_s"):
            continue
        rel = recorded_rel if _carries_interval(metric, space) else None
        check = speed_check(
            metric,
            record.figure(metric),
            measured.get(metric),
            tolerance,
            interval_rel=rel,
            one_sided=one_sided,
        )
        if metric == THROUGHPUT:
            check = with_intervals(check, record.figure, measured.get)
        checks.append(check)
    budget = space.constraints.memory_budget_mib
    for metric in SHOWN:
        if metric in speed:
            continue
        rec, mes = _number(record.figure(metric)), _number(measured.get(metric))
        if metric == "peak_memory_mib" and budget is not None and mes is not None:
            checks.append(
                Check(
                    metric,
                    rec,
                    mes,
                    None,
                    budget,
                    "<= memory budget",
                    mes <= budget,
                    None if mes <= budget else "above",
                )
            )
        else:
            checks.append(Check(metric, rec, mes, None, None, "shown only", None))
    return checks


# End-to-end latencies under a closed loop: with a fixed number of requests in flight, the mean
# latency is that number over the request rate (Little's law), so a relaunch that moves the
# rate by x moves the latencies by about 1/x, and they carry the throughput's interval. Under
# open-loop arrivals they do not (queueing is not linear in the rate): the tolerance only.
CLOSED_LOOP_LATENCIES = ("e2e_latency_p50_ms", "e2e_latency_p95_ms")


def _carries_interval(metric: str, space: SearchSpace) -> bool:
    """Whether `metric`'s band includes the recorded throughput interval."""
    if metric == THROUGHPUT:
        return True
    return metric in CLOSED_LOOP_LATENCIES and space.workload.request_rate_per_s is None


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
    one_sided: bool = False,
    on_phase: Callable[[str], None] | None = None,
    adapters: list[Adapter] | None = None,
    while_up: WhileUp | None = None,
) -> VerifyResult:
    """Re-measure the recommended (or a given) trial through its deploy command.

    Two-sided by default: a judged figure outside its band, above or below, is a miss;
    `one_sided`: only a worse one is. `adapters` (--adapter) replace the study's own (the
    first carries the name the trials measured); `while_up`: another client's turn on the
    same launch (autotune.outside).
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
        rule=ONE_SIDED if one_sided else TWO_SIDED,
        tolerance=tolerance,
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
            while_up=while_up,
        )
    except TrialFailure as failure:
        result.failure = f"{failure.kind}: {failure.reason}"
        result.log_tail = failure.log_tail
        return result
    recorded_on, here = trial_machine(trial.user_attrs), machine_here(study)
    if recorded_on is not None and (unlike := recorded_on.unlike(here)):
        named = [name for name in unlike if name in here.versions]
        result.notes.append(
            f"trial {trial.number} was measured on {recorded_on.words(named)}, this relaunch "
            f"runs on {here.words(named)}: the figures may differ for that alone"
        )
    result.recorded_clock = clock_of(trial_record.environment)
    result.measured_clock = clock_of(Environment.of(m.environment))
    unlike = clock_note(trial.number, result.recorded_clock, result.measured_clock)
    if unlike is not None:
        result.notes.append(unlike)
    environment = Environment.of(m.environment)
    result.command = environment.server_command or ""
    command_exact = (environment.export_exact or "true") == "true"
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
    result.checks = compare(trial, m, space, tolerance, one_sided=one_sided)
    result.recorded_load = load_of(trial_record.environment)
    result.measured_load = load_of(environment)
    moved = load_change(result.recorded_load, result.measured_load)
    if moved is not None and not result.passed:
        result.notes.append(
            f"the miss coincides with another load on the machine ({moved}): it may be the "
            "moment's, not the configuration's; measure again when the load is as it was: "
            f"autotune verify --study {study.study_name} --trial {trial.number}"
        )
    return result


def measured_in_process(trial: FrozenTrial) -> bool:
    return (TrialRecord.of(trial).environment.runner or "inprocess") == "inprocess"


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
