"""The report's tables of trials: the top configurations with their deploy commands, the known
recipes, the what-ifs, the infeasible trials (with their speed: what the floor cost), the
repeated proposals and the trials that did not complete.

A repeated proposal is its twin's row: it is named once, in its own short list, never as a row
or a deploy block of its own.
"""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from autotune.engines.gpus import describe
from autotune.export import Export
from autotune.records.stored import TrialRecord
from autotune.report.cells import (
    e,
    figure_cells,
    figure_heads,
    params_text,
    set_values,
    tag,
    trial_label,
)
from autotune.report.data import (
    ReportData,
    TopConfig,
    changed_params,
    named_beside,
    what_ifs_title,
)
from autotune.report.text import gpu_mismatch
from autotune.study.store.storage import failure_of


def _section(anchor: str, title: str, intro: str, head: str, rows: list[str]) -> str:
    """A heading, a paragraph saying what the table holds, the table."""
    return f"<h2 id='{anchor}'>{title}</h2><p>{intro}</p><table>{head}{''.join(rows)}</table>"


def export_block(fmt: str, export: Export | str) -> str:
    if isinstance(export, str):
        return f"<div><b>{e(fmt)}</b>: <span class='note'>{e(export)}</span></div>"
    exact = "" if export.exact else " " + tag("not exact")
    return f"<div><b>{e(fmt)}</b>{exact}<pre class='export'>{e(export.text)}</pre></div>"


def top_section(data: ReportData) -> str:
    study = data.study.study_name
    head = f"<tr><th>trial</th>{figure_heads()}"
    head += "<th>parameters (changed from the reference)</th><th>GPU</th></tr>"
    rows, blocks = [], []
    for top in data.top:
        rows.append(_top_row(top, data))
        exports = "".join(export_block(f, x) for f, x in top.exports.items())
        open_attr = " open" if top.recommended else ""
        blocks.append(
            f"<details{open_attr}><summary>trial {top.trial.number} deploy commands "
            f"(<code>autotune export --study {e(study)} --trial {top.trial.number} "
            f"--format swift|lmdeploy|vllm|yaml</code>)</summary>{exports}</details>"
        )
    return "<table class='top'>" + head + "".join(rows) + "</table>" + "".join(blocks)


def _top_row(top: TopConfig, data: ReportData) -> str:
    record = TrialRecord.of(top.trial)
    tags = [
        name
        for name, present in (
            ("recommended", top.recommended),
            ("Pareto", top.on_front),
            ("infeasible", not top.feasible),
            ("reference", record.is_reference),
        )
        if present
    ]
    tags += [name] if (name := record.candidate or record.baseline) else []
    params = e(params_text(changed_params(top.trial, data.reference)))
    css = " class='rec'" if top.recommended else ""
    return (
        f"<tr{css}><td>{trial_label(top.trial, tags)}</td>{figure_cells(top.trial)}"
        f"<td>{params}</td>{_gpu_cell(top.trial, data)}</tr>"
    )


def _gpu_cell(trial: FrozenTrial, data: ReportData) -> str:
    """Where the trial ran, tagged when its GPU differs from the reference's."""
    unlike = gpu_mismatch(trial, data.reference)
    mark = f" <span class='tag bad' title='{e(unlike)}'>unlike reference</span>" if unlike else ""
    return f"<td>{e(describe(TrialRecord.of(trial).gpus) or '-')}{mark}</td>"


def named_section(data: ReportData) -> str:
    """The reference and the named candidates (known recipes) beside the recommendation."""
    named = named_beside(data.trials, data.recommendation)
    if not named:
        return ""
    rec = data.recommendation.trial.number if data.recommendation is not None else None
    what_ifs = {t.number: why for t, why in data.what_ifs}
    head = f"<tr><th>trial</th>{figure_heads()}<th>parameters</th><th>outcome</th></tr>"
    rows = []
    for trial in named:
        record = TrialRecord.of(trial)
        tags = ["recommended"] if trial.number == rec else []
        tags += ["reference"] if record.is_reference else []
        tags += [name] if (name := record.candidate or record.baseline) else []
        if trial.state != TrialState.COMPLETE:
            outcome = f"{trial.state.name.lower()}: " + str(
                failure_of(data.study, trial).failure_reason or "no reason recorded"
            )
        elif trial.number in data.infeasible:
            outcome = "infeasible: " + "; ".join(data.infeasible[trial.number])
        elif trial.number in what_ifs:
            outcome = f"what-if: {what_ifs[trial.number]}"
        else:
            outcome = "recommended" if trial.number == rec else "deployable, feasible"
        css = " class='rec'" if trial.number == rec else ""
        rows.append(
            f"<tr{css}><td>{trial_label(trial, tags)}</td>{figure_cells(trial)}"
            f"<td>{e(params_text(set_values(record.config)))}</td><td>{e(outcome)}</td></tr>"
        )
    intro = (
        "The reference and every named candidate (the space's <code>candidates:</code> and "
        "<code>--enqueue</code>), measured under the same floor as the search."
    )
    return _section("named", "Known recipes beside the recommendation", intro, head, rows)


def what_if_section(data: ReportData) -> str:
    if not data.what_ifs:
        return ""
    head = f"<tr><th>trial</th>{figure_heads()}<th>parameters</th>"
    head += "<th>why it is not deployable</th></tr>"
    rows = []
    for trial, why in data.what_ifs:
        record = TrialRecord.of(trial)
        tags = ["reference"] if record.is_reference else []
        tags += [name] if (name := record.candidate or record.baseline) else []
        rows.append(
            f"<tr><td>{trial_label(trial, tags)}</td>{figure_cells(trial)}"
            f"<td>{e(params_text(set_values(record.config)))}</td><td>{e(why)}</td></tr>"
        )
    intro = (
        f"Measured, but no <code>{e(data.deploy_target)}</code> command reproduces them: they "
        "show what the deploy target leaves on the table, and are never recommended."
    )
    return _section("what-ifs", what_ifs_title(data.what_ifs).capitalize(), intro, head, rows)


def infeasible_section(data: ReportData) -> str:
    """Each infeasible trial with its figures: how much speed the floor turned down, and why."""
    if not data.infeasible:
        return ""
    by_number = {t.number: t for t in data.complete}
    head = f"<tr><th>trial</th>{figure_heads()}<th>parameters</th><th>why</th></tr>"
    rows = [
        f"<tr><td>{number}</td>{figure_cells(by_number[number])}"
        f"<td>{e(params_text(changed_params(by_number[number], data.reference)))}</td>"
        f"<td>{e('; '.join(reasons))}</td></tr>"
        for number, reasons in data.infeasible.items()
        if number in by_number
    ]
    intro = (
        "Measured, but outside a constraint; never recommended while a feasible trial exists. "
        "Their speed is what the constraint turned down."
    )
    return _section("infeasible", "Infeasible trials", intro, head, rows)


def repeats_note(data: ReportData) -> str:
    """The repeated proposals, named once: each is the trial it repeats; and each stored
    claim of one that does not hold."""
    impossible = "".join(f"<p class='note'>{e(line)}</p>" for line in data.impossible_repeats)
    if not data.repeats:
        return impossible
    pairs = ", ".join(
        f"trial {t.number} repeated trial {TrialRecord.of(t).duplicate_of}" for t in data.repeats
    )
    return (
        f"<p class='note'>Repeated proposals (the sampler proposed a configuration already "
        f"measured; nothing was re-run, and they appear nowhere else here): {e(pairs)}.</p>"
        + impossible
    )


def _reason(trial: FrozenTrial, data: ReportData) -> str:
    reason = failure_of(data.study, trial).failure_reason
    if reason:
        return str(reason)
    raced = TrialRecord.of(trial).raced_reason
    if raced:
        return raced
    # Optuna keeps no message for a pruned trial; screening prunes what racing does not.
    return "screening: accuracy already below the floor" if trial.state == TrialState.PRUNED else ""


def _state(trial: FrozenTrial, data: ReportData) -> str:
    kind = failure_of(data.study, trial).failure_kind
    # An out-of-memory trial is PRUNED for the sampler's sake; it failed all the same.
    if kind:
        return f"FAIL ({kind})"
    if TrialRecord.of(trial).raced_by is not None:
        return "stopped by racing"
    return "screened out" if trial.state == TrialState.PRUNED else trial.state.name


def unfinished_section(data: ReportData) -> str:
    rows = [
        f"<tr><td>{t.number}</td><td>{e(_state(t, data))}</td>"
        f"<td>{e(params_text(changed_params(t, data.reference)))}</td>"
        f"<td>{e(_reason(t, data))}</td></tr>"
        for t in data.trials
        if t.state in (TrialState.FAIL, TrialState.PRUNED)
    ]
    if not rows:
        return ""
    head = "<tr><th>trial</th><th>state</th><th>parameters</th><th>reason</th></tr>"
    intro = (
        "A failed trial keeps its log tail in the <code>log_tail</code> user attribute and, for "
        "new studies, a <code>log_tail.txt</code> artifact (see <code>autotune dashboard</code>)."
    )
    return _section("unfinished", "Trials that did not complete", intro, head, rows)
