"""`autotune best`: the feasible Pareto front and the recommendation, as a table or JSON."""

from __future__ import annotations

import io
import math
from typing import Any, TypedDict

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.table import Table

from autotune.accuracy.timed import TIMED_NOTE, timed_study
from autotune.engines.gpus import describe, differs
from autotune.export.reproduce import COMMANDS
from autotune.records.repeats import impossible_repeats
from autotune.records.repeats import measured as measured_trials
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.report.confirmation import confirmation_json, confirmation_lines
from autotune.report.data import (
    changed_params,
    named_beside,
    params_words,
    reference_why,
    what_ifs_title,
    why_no_tpot,
)
from autotune.report.headline import baseline_json, gain_lines
from autotune.report.ratio import versus_reference
from autotune.study.results.counting import trial_counts
from autotune.study.results.provenance import provenance, reference_config
from autotune.study.results.select import (
    CONSTRAINT_NAMES,
    UNEQUAL_PREFIX,
    NoDeployableTrial,
    Recommendation,
    constraint_values,
    deploy_target,
    infeasible_trials,
    is_feasible,
    objective_names,
    recommend,
    reference_trial,
    throughput_interval,
)
from autotune.study.results.timeshare import study_time_share
from autotune.study.store.storage import failure_of

HEADLINE = (
    "throughput_output_tokens_per_s",
    "e2e_latency_p95_ms",
    "ttft_p50_ms",
    "tpot_p50_ms",
    "accuracy",
    "peak_memory_mib",
)


class TrialSummary(TypedDict):
    """A trial as `best --json` shows it."""

    trial: int
    state: str
    reference: bool
    candidate: str | None
    baseline: str | None
    feasible: bool
    constraints: dict[str, float]
    figures: dict[str, float | None]
    throughput_interval_tokens_per_s: tuple[float, float] | None
    config: dict[str, Any] | None
    launch_id: str | None
    time_s: dict[str, Any] | None
    gpus: list[dict[str, Any]] | None
    gpu_unlike_reference: str | None


def trial_summary(trial: FrozenTrial, reference: FrozenTrial | None = None) -> TrialSummary:
    record = TrialRecord.of(trial)
    return TrialSummary(
        trial=trial.number,
        state=trial.state.name,
        reference=record.is_reference,
        candidate=record.candidate,
        baseline=record.baseline,
        feasible=is_feasible(trial),
        constraints=dict(record.constraints or {}),
        figures={name: record.figure(name) for name in HEADLINE},
        throughput_interval_tokens_per_s=throughput_interval(trial),
        config=record.config or None,
        launch_id=record.launch_id,
        time_s=record.time_s.stored() if record.time_s is not None else None,
        gpus=record.gpus or None,
        gpu_unlike_reference=gpu_mismatch(trial, reference),
    )


class StudySummary(TypedDict):
    """What `best --json` shows of the study, before its recommendation."""

    study: str
    objectives: dict[str, str]
    trials: dict[str, object]
    dummy_weights: bool
    accuracy_timed_not_judged: bool
    deploy_target: str | None
    time: dict[str, object]
    infeasible: dict[str, list[str]]
    floor_warning: str | None
    impossible_repeats: list[str]


def gpu_mismatch(trial: FrozenTrial, reference: FrozenTrial | None) -> str | None:
    """Why the trial's GPU is not the reference's kind (model or clock), or None."""
    if reference is None or reference.number == trial.number:
        return None
    return differs(TrialRecord.of(trial).gpus, TrialRecord.of(reference).gpus)


def best_json(study: optuna.Study, *, gpu_price_per_hour: float | None = None) -> dict[str, Any]:
    data = StudySummary(
        study=study.study_name,
        objectives=dict(
            zip(objective_names(study), [d.name.lower() for d in study.directions], strict=True)
        ),
        trials=trial_counts(study).to_dict(),
        dummy_weights=StudyRecord.of(study).dummy_weights,
        # The accuracy pass ran for its time alone (autotune.accuracy.timed): no verdict.
        accuracy_timed_not_judged=timed_study(study),
        deploy_target=deploy_target(study),
        time=study_time_share(study).to_dict(),
        infeasible={str(n): reasons for n, reasons in _infeasible(study).items()},
        floor_warning=StudyRecord.of(study).floor_warning,
        impossible_repeats=impossible_repeats(study.get_trials(deepcopy=False)),
    )
    ref = reference_trial(study)
    try:
        rec = recommend(study)
    except NoDeployableTrial as exc:
        return {
            **data,
            "feasible_found": False,
            "recommended": None,
            "reason": str(exc),
            "pareto_front": [],
            "ties": [],
            "what_ifs": [_what_if(t, why) for t, why in exc.what_ifs],
            **baseline_json(study, None, gpu_price_per_hour),
        }
    ratio = versus_reference(rec.trial, ref)  # the "x the reference" figure, with its interval
    return {
        **data,
        "feasible_found": rec.feasible,
        "recommended": trial_summary(rec.trial, ref),
        "versus_reference": ratio.to_dict() if ratio is not None else None,
        **baseline_json(study, rec.trial, gpu_price_per_hour),
        "reason": rec.reason,
        "pareto_front": [trial_summary(t, ref) for t in rec.front],
        "ties": [t.number for t in rec.ties],
        "what_ifs": [_what_if(t, why) for t, why in rec.what_ifs],
        "confirmation": confirmation_json(rec),
    }


def _complete(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def _infeasible(study: optuna.Study) -> dict[int, list[str]]:
    return infeasible_trials(study, _complete(study))


def _unlike_reference(study: optuna.Study) -> dict[int, str]:
    reference = reference_trial(study)
    return {
        t.number: why
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if (why := gpu_mismatch(t, reference)) is not None
    }


def _what_if(trial: FrozenTrial, why: str) -> dict[str, Any]:
    return {**trial_summary(trial), "not_deployable_because": why}


def _cell(value: Any, spec: str) -> str:
    """A figure in a table cell: "-" when not recorded, "n/a" when it could not be computed
    (NaN: why is said under the table)."""
    if not isinstance(value, (int, float)):
        return "-"
    return format(value, spec) if math.isfinite(value) else "n/a"


def _throughput_cell(trial: FrozenTrial) -> str:
    record = TrialRecord.of(trial)
    value = record.figure("throughput_output_tokens_per_s")
    ci = record.figure("throughput_ci_rel")
    text = _cell(value, ".1f")
    if ci is not None and math.isfinite(ci):
        text += f" ±{ci:.1%}"
    return text


def _changed_params(trial: FrozenTrial) -> str:
    """The searched parameters' values, as `name=value` words."""
    return params_words(changed_params(trial, None))


def print_table(
    console: Console, title: str, trials: list[FrozenTrial], marked: int | None
) -> None:
    """The table, then why a figure of it says n/a."""
    console.print(_table(title, trials, marked))
    for trial in trials:
        why = why_no_tpot(TrialRecord.of(trial))
        if why is not None:
            console.print(f"  trial {trial.number}: TPOT n/a: {why}", markup=False)


def _table(title: str, trials: list[FrozenTrial], marked: int | None) -> Table:
    table = Table(title=title, title_justify="left")
    for header in (
        "trial",
        "tok/s (95% CI)",
        "p95 e2e ms",
        "TTFT p50 ms",
        "TPOT p50 ms",
        "accuracy",
        "peak MiB",
        "parameters",
    ):
        table.add_column(header, overflow="fold")
    for trial in trials:
        record = TrialRecord.of(trial)
        marker = "*" if trial.number == marked else ""
        ref = " (ref)" if record.is_reference else ""
        if record.candidate or record.baseline:
            ref = f" ({record.candidate or record.baseline})"
        table.add_row(
            f"{trial.number}{marker}{ref}",
            _throughput_cell(trial),
            _cell(record.figure("e2e_latency_p95_ms"), ".0f"),
            _cell(record.figure("ttft_p50_ms"), ".0f"),
            _cell(record.figure("tpot_p50_ms"), ".1f"),
            "not judged"
            if record.accuracy_not_judged is not None
            else _cell(record.figure("accuracy"), ".3f"),
            _cell(record.figure("peak_memory_mib"), ".0f"),
            _changed_params(trial),
        )
    return table


def best_text(study: optuna.Study, *, gpu_price_per_hour: float | None = None) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=140, highlight=False)
    target = deploy_target(study)
    where = f"deployable with {COMMANDS[target]}" if target else "on the endpoint"
    try:
        rec: Recommendation | None = recommend(study)
        what_ifs = rec.what_ifs if rec is not None else []
    except NoDeployableTrial as exc:
        rec, what_ifs = None, exc.what_ifs
        console.print(f"study '{study.study_name}': {exc}")
    if rec is not None and rec.front:
        print_table(
            console,
            f"study '{study.study_name}': feasible Pareto front, {where}",
            rec.front,
            rec.trial.number,
        )
    elif rec is not None:
        console.print(f"study '{study.study_name}': no feasible trial {where}")
        violations = dict(zip(CONSTRAINT_NAMES, constraint_values(rec.trial), strict=True))
        console.print(f"  constraint violations of the best effort: {violations}")
    infeasible = _infeasible(study)
    if infeasible:
        console.print("infeasible trials (never recommended while a feasible one exists):")
        for number, reasons in infeasible.items():
            console.print(f"  trial {number}: {'; '.join(reasons)}", markup=False)
    stored = StudyRecord.of(study)
    if stored.floor_warning:
        console.print(f"note: {stored.floor_warning}", markup=False)
    unlike = _unlike_reference(study)
    if unlike:
        console.print("trials on a GPU unlike the reference's (compare their figures with care):")
        for number, why in unlike.items():
            console.print(f"  trial {number}: {why}", markup=False)
    if what_ifs:
        unequal = any(why.startswith(UNEQUAL_PREFIX) for _, why in what_ifs)
        print_table(
            console,
            f"{what_ifs_title(what_ifs)}: measured, but "
            + (f"not deployable to {target}" if target and not unequal else "not recommended"),
            [t for t, _ in what_ifs],
            None,
        )
        for trial, why in what_ifs:
            console.print(f"  trial {trial.number}: {why}")
    if stored.dummy_weights:
        console.print(
            "dummy weights: random weights of the real architecture; speed figures only, "
            "accuracy not measured"
        )
    if timed_study(study):
        console.print(f"{TIMED_NOTE} (its pass is in the time split; no verdict)")
    named = named_beside(study.get_trials(deepcopy=False), rec)
    if named:
        title = "the reference and the named candidates beside the recommendation"
        print_table(console, title, named, rec.trial.number if rec is not None else None)
        for trial in named:
            if trial.state != TrialState.COMPLETE:
                record = TrialRecord.of(trial)  # a candidate may be raced like any trial
                why = (
                    failure_of(study, trial).failure_reason
                    or record.raced_reason
                    or trial.state.name.lower()
                )
                label = record.candidate or record.baseline or "reference"
                console.print(f"  trial {trial.number} ({label}): {why}", markup=False)
    counts = trial_counts(study)
    # Unwrapped: the same line as the run's summary and the report's, for a script to find.
    console.print(counts.line(), markup=False, soft_wrap=True)
    for failure in counts.failures:
        console.print(
            f"  trial {failure.trial} failed ({failure.kind_words}): {failure.reason}",
            markup=False,
            soft_wrap=True,
        )
    console.print(f"time: {study_time_share(study).line()}")
    if rec is None:
        return buffer.getvalue().rstrip()
    console.print(f"recommended: trial {rec.trial.number} — {rec.reason}")
    for line in gain_lines(study, rec.trial, gpu_price_per_hour):
        console.print(f"  {line}", markup=False)
    console.print(f"  {_changed_params(rec.trial) or '(reference configuration)'}")
    reference = reference_config(study.get_trials(deepcopy=False))
    console.print(f"  what ran: {provenance(TrialRecord.of(rec.trial), reference)}", markup=False)
    if (ratio := versus_reference(rec.trial, reference_trial(study))) is not None:
        console.print(f"  versus the accuracy reference: {ratio.words()}", markup=False)
    for line in confirmation_lines(rec, dummy_weights=stored.dummy_weights):
        console.print(f"  {line}", markup=False)
    if TrialRecord.of(rec.trial).is_reference and rec.feasible:
        console.print("  the reference itself is recommended; each faster trial and why not:")
        measured = measured_trials(_complete(study), study.get_trials(deepcopy=False))
        for line in reference_why(study, rec, measured, _infeasible(study)):
            console.print(f"    {line}", markup=False)
    ran_on = describe(TrialRecord.of(rec.trial).gpus)
    if ran_on:
        console.print(f"  measured on {ran_on}", markup=False)
    if rec.ties:
        tied = ", ".join(f"trial {t.number} ({_throughput_cell(t)} tok/s)" for t in rec.ties)
        console.print(f"  ties (throughput differences inside their interval): {tied}")
    console.print(
        f"  export: autotune export --study {study.study_name}"
        + (f" --format {target}" if target else "")
    )
    return buffer.getvalue().rstrip()


def failures_text(study: optuna.Study) -> str:
    """Why each trial of a study without a completed one ended, one line each."""
    lines = [f"study '{study.study_name}': no trial completed"]
    for trial in study.get_trials(deepcopy=False):
        failed = failure_of(study, trial)
        reason = failed.failure_reason or trial.state.name.lower()
        # A launch that did not start is PRUNED for the sampler's sake; it failed all the same.
        state = "FAIL" if failed.failure_kind else trial.state.name
        lines.append(f"  trial {trial.number} {state}: {reason}")
    return "\n".join(lines)
