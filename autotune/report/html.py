"""`autotune report`: one self-contained HTML file to attach to a pull request.

Plotly's JavaScript is embedded once, inline, so the file opens offline and nothing is
fetched from a CDN. Data comes from data.py, figures from plots.py.
"""

from __future__ import annotations

import datetime as dt
import html
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from autotune import __version__
from autotune.engines.gpus import describe
from autotune.export import Export
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.report.data import (
    ReportData,
    TopConfig,
    changed_params,
    collect,
    finite,
    named_beside,
    params_words,
    what_ifs_title,
)
from autotune.report.output import output_target, write_text_atomically
from autotune.report.plots import accuracy_figure, batch_figure, importance_figure, pareto_figure
from autotune.report.text import gpu_mismatch
from autotune.study.storage import failure_of

# (user attribute, label, format, higher is better) for the figures tables.
FIGURES: tuple[tuple[str, str, str, bool], ...] = (
    ("throughput_output_tokens_per_s", "throughput (tok/s)", ".1f", True),
    ("e2e_latency_p95_ms", "e2e p95 (ms)", ".0f", False),
    ("ttft_p50_ms", "TTFT p50 (ms)", ".0f", False),
    ("tpot_p50_ms", "TPOT p50 (ms)", ".1f", False),
    ("accuracy", "accuracy", ".3f", True),
    ("peak_memory_mib", "peak memory (MiB)", ".0f", False),
    ("startup_s", "start-up (s)", ".1f", False),
)

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1280px;padding:16px 24px;color:#222;line-height:1.4}
h1{margin-bottom:0}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
.sub{color:#666;margin-top:4px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.rec td{background:#eef8ee}.bad{color:#b00}.good{color:#070}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;white-space:pre-wrap;word-break:break-all;
font-size:12px;margin:4px 0}
.grid{display:grid;grid-template-columns:minmax(320px,1fr) 2fr;gap:24px;align-items:start}
.note{color:#666;font-style:italic}.tag{font-size:11px;padding:1px 6px;border-radius:8px;
background:#eee;margin-left:4px}
details{margin:4px 0}summary{cursor:pointer}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: Any, spec: str) -> str:
    number = finite(value)
    return format(number, spec) if number is not None else "-"


def _params_text(params: dict[str, Any]) -> str:
    return params_words(params) or "(reference configuration)"


def _set_values(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if v is not None}


def _versus(value: Any, base: Any, higher_better: bool) -> str:
    """Relative change against the reference, coloured by whether it is an improvement."""
    v, b = finite(value), finite(base)
    if v is None or b is None or b == 0:
        return "-"
    change = (v - b) / abs(b)
    better = change > 0 if higher_better else change < 0
    css = "good" if better else "bad" if change else ""
    return f'<span class="{css}">{change:+.0%}</span>'


def _figures_table(rec: FrozenTrial, ref: FrozenTrial | None) -> str:
    head = "<tr><th>figure</th><th>recommended</th>"
    head += "<th>reference</th><th>vs reference</th></tr>" if ref is not None else "</tr>"
    rows = [head]
    recorded = TrialRecord.of(rec)
    for key, label, spec, higher in FIGURES:
        value = recorded.figure(key)
        cells = f"<td>{_e(label)}</td><td class='num'>{_fmt(value, spec)}</td>"
        if ref is not None:
            base = TrialRecord.of(ref).figure(key)
            cells += f"<td class='num'>{_fmt(base, spec)}</td>"
            cells += f"<td class='num'>{_versus(value, base, higher)}</td>"
        rows.append(f"<tr>{cells}</tr>")
    return "<table>" + "".join(rows) + "</table>"


def _paired_line(trial: FrozenTrial) -> str:
    paired = TrialRecord.of(trial).paired_vs_reference
    if not paired:
        return ""
    conf = finite(paired.get("confidence")) or 0.0
    return (
        f"<p>Accuracy vs reference on the same {_e(paired.get('n_items'))} items: "
        f"{_fmt(paired.get('accuracy_diff'), '+.3f')} "
        f"({conf:.0%} interval {_fmt(paired.get('ci_low'), '+.3f')} to "
        f"{_fmt(paired.get('ci_high'), '+.3f')}; McNemar p = "
        f"{_fmt(paired.get('mcnemar_p'), '.3g')})</p>"
    )


def _samples_table(data: ReportData) -> str:
    if not data.samples:
        return "<p class='note'>No sample outputs stored for this trial.</p>"
    with_ref = bool(data.reference_answers)
    head = ["item", "category", "prompt", "answer", "expected", "score"]
    if with_ref:
        head.insert(4, "reference trial's answer")
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in data.samples:
        refs = r.get("references") or []
        cells = [
            _e(r.get("id")),
            _e(r.get("category", "")),
            _e(r.get("prompt", "")),
            f"<b>{_e(r.get('answer') or '')}</b>",
            _e(" | ".join(str(x) for x in refs)),
            f"<span class='{'good' if r.get('passed') else 'bad'}'>"
            f"{_fmt(r.get('score'), '.2f')}</span>",
        ]
        if with_ref:
            cells.insert(4, _e(data.reference_answers.get(str(r.get("id")), "-")))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    more = data.samples_total - len(data.samples)
    tail = (
        f"<p class='note'>{more} more items (failures shown first) in the trial's "
        "sample_outputs.json artifact.</p>"
        if more > 0
        else ""
    )
    return "<table class='samples'>" + "".join(rows) + "</table>" + tail


def _export_block(fmt: str, export: Export | str) -> str:
    if isinstance(export, str):
        return f"<div><b>{_e(fmt)}</b>: <span class='note'>{_e(export)}</span></div>"
    exact = "" if export.exact else " <span class='tag'>not exact</span>"
    return f"<div><b>{_e(fmt)}</b>{exact}<pre class='export'>{_e(export.text)}</pre></div>"


def _top_section(data: ReportData) -> str:
    study = data.study.study_name
    rows = ["<tr><th>trial</th>"]
    rows[0] += "".join(f"<th>{_e(label)}</th>" for _, label, _, _ in FIGURES[:6])
    rows[0] += "<th>parameters (changed from the reference)</th><th>GPU</th></tr>"
    blocks = []
    for top in data.top:
        rows.append(_top_row(top, data))
        exports = "".join(_export_block(f, e) for f, e in top.exports.items())
        open_attr = " open" if top.recommended else ""
        blocks.append(
            f"<details{open_attr}><summary>trial {top.trial.number} deploy commands "
            f"(<code>autotune export --study {_e(study)} --trial {top.trial.number} "
            f"--format swift|lmdeploy|vllm|yaml</code>)</summary>{exports}</details>"
        )
    return "<table class='top'>" + "".join(rows) + "</table>" + "".join(blocks)


def _top_row(top: TopConfig, data: ReportData) -> str:
    tags = []
    if top.recommended:
        tags.append("recommended")
    if top.on_front:
        tags.append("Pareto")
    if not top.feasible:
        tags.append("infeasible")
    top_record = TrialRecord.of(top.trial)
    if top_record.is_reference:
        tags.append("reference")
    if top_record.candidate:
        tags.append(top_record.candidate)
    label = str(top.trial.number) + "".join(f"<span class='tag'>{t}</span>" for t in tags)
    figures = _figure_cells(top.trial)
    params = _e(_params_text(changed_params(top.trial, data.reference)))
    css = " class='rec'" if top.recommended else ""
    return f"<tr{css}><td>{label}</td>{figures}<td>{params}</td>{_gpu_cell(top.trial, data)}</tr>"


def _gpu_cell(trial: FrozenTrial, data: ReportData) -> str:
    """Where the trial ran, tagged when its GPU differs from the reference's."""
    unlike = gpu_mismatch(trial, data.reference)
    tag = f" <span class='tag bad' title='{_e(unlike)}'>unlike reference</span>" if unlike else ""
    return f"<td>{_e(describe(TrialRecord.of(trial).gpus) or '-')}{tag}</td>"


def _figure_cells(trial: FrozenTrial) -> str:
    return "".join(
        f"<td class='num'>{_fmt(TrialRecord.of(trial).figure(key), spec)}</td>"
        for key, _, spec, _ in FIGURES[:6]
    )


def _named_section(data: ReportData) -> str:
    """The reference and the named candidates (known recipes) beside the recommendation."""
    named = named_beside(data.trials, data.recommendation)
    if not named:
        return ""
    rec = data.recommendation.trial.number if data.recommendation is not None else None
    what_ifs = {t.number: why for t, why in data.what_ifs}
    head = "<tr><th>trial</th>" + "".join(f"<th>{_e(label)}</th>" for _, label, _, _ in FIGURES[:6])
    head += "<th>parameters</th><th>outcome</th></tr>"
    rows = []
    for trial in named:
        record = TrialRecord.of(trial)
        tags = ["recommended"] if trial.number == rec else []
        tags += ["reference"] if record.is_reference else []
        tags += [record.candidate] if record.candidate else []
        label = str(trial.number) + "".join(f"<span class='tag'>{_e(t)}</span>" for t in tags)
        if trial.state != TrialState.COMPLETE:
            outcome = f"{trial.state.name.lower()}: " + str(
                failure_of(data.study, trial).get("failure_reason") or "no reason recorded"
            )
        elif trial.number in data.infeasible:
            outcome = "infeasible: " + "; ".join(data.infeasible[trial.number])
        elif trial.number in what_ifs:
            outcome = f"what-if: {what_ifs[trial.number]}"
        else:
            outcome = "recommended" if trial.number == rec else "deployable, feasible"
        params = _e(_params_text(_set_values(record.config)))
        css = " class='rec'" if trial.number == rec else ""
        rows.append(
            f"<tr{css}><td>{label}</td>{_figure_cells(trial)}<td>{params}</td>"
            f"<td>{_e(outcome)}</td></tr>"
        )
    return (
        "<h2 id='named'>Known recipes beside the recommendation</h2><p>The reference and every "
        "named candidate (the space's <code>candidates:</code> and <code>--enqueue</code>), "
        "measured under the same floor as the search.</p><table>"
        + head
        + "".join(rows)
        + "</table>"
    )


def _what_if_section(data: ReportData) -> str:
    if not data.what_ifs:
        return ""
    head = "<tr><th>trial</th>" + "".join(f"<th>{_e(label)}</th>" for _, label, _, _ in FIGURES[:6])
    head += "<th>parameters</th><th>why it is not deployable</th></tr>"
    rows = []
    for trial, why in data.what_ifs:
        record = TrialRecord.of(trial)
        tag = "<span class='tag'>reference</span>" if record.is_reference else ""
        if record.candidate:
            tag += f"<span class='tag'>{_e(record.candidate)}</span>"
        figures = _figure_cells(trial)
        params = _e(_params_text(_set_values(record.config)))
        rows.append(
            f"<tr><td>{trial.number}{tag}</td>{figures}<td>{params}</td><td>{_e(why)}</td></tr>"
        )
    return (
        f"<h2 id='what-ifs'>{what_ifs_title(data.what_ifs).capitalize()}</h2><p>Measured, but no "
        f"<code>{_e(data.deploy_target)}</code> command reproduces them: they show what the "
        "deploy target leaves on the table, and are never recommended.</p><table>"
        + head
        + "".join(rows)
        + "</table>"
    )


def _infeasible_section(data: ReportData) -> str:
    if not data.infeasible:
        return ""
    rows = "".join(
        f"<tr><td>{number}</td><td>{_e('; '.join(reasons))}</td></tr>"
        for number, reasons in data.infeasible.items()
    )
    return (
        "<h2 id='infeasible'>Infeasible trials</h2><p>Measured, but outside a constraint; "
        "never recommended while a feasible trial exists.</p><table><tr><th>trial</th>"
        f"<th>why</th></tr>{rows}</table>"
    )


def _recommended_section(data: ReportData) -> str:
    rec, ref = data.recommendation, data.reference
    if rec is None:
        return (
            "<h2 id='recommended'>No recommendation yet</h2>"
            f"<p class='note'>{_e(data.no_recommendation)}</p>"
        )
    feasible_note = "" if rec.feasible else " <span class='tag bad'>best effort</span>"
    ties = ""
    if rec.ties:
        tied = ", ".join(f"trial {t.number}" for t in rec.ties)
        ties = f"<p class='note'>Tied on throughput (intervals overlap): {_e(tied)}.</p>"
    ref_line = (
        f"<p>Reference: trial {ref.number} — "
        f"{_e(_params_text(_set_values(TrialRecord.of(ref).config)))}"
        "</p>"
        if ref is not None
        else "<p class='note'>No completed reference trial.</p>"
    )
    params = _e(_params_text(changed_params(rec.trial, ref)))
    ran_on = describe(TrialRecord.of(rec.trial).gpus)
    unlike = gpu_mismatch(rec.trial, ref)
    where = f"<p>Measured on {_e(ran_on)}.</p>" if ran_on else ""
    if unlike:
        where += f"<p class='note'>Its GPU is unlike the reference's: {_e(unlike)}.</p>"
    return (
        f"<h2 id='recommended'>Recommended: trial {rec.trial.number}{feasible_note}</h2>"
        f"<p>{_e(rec.reason)}. Parameters: <code>{params}</code></p>{where}{ties}"
        f"<div class='grid'><div>{_figures_table(rec.trial, ref)}{_paired_line(rec.trial)}"
        f"{ref_line}</div><div><h3>Sample outputs of trial {rec.trial.number}</h3>"
        f"{_samples_table(data)}</div></div>"
    )


def _reason(trial: FrozenTrial, data: ReportData) -> str:
    reason = failure_of(data.study, trial).get("failure_reason")
    if reason:
        return str(reason)
    # Optuna keeps no message for a pruned trial; screening is the only thing that prunes.
    return "screening: accuracy already below the floor" if trial.state == TrialState.PRUNED else ""


def _state(trial: FrozenTrial, data: ReportData) -> str:
    kind = failure_of(data.study, trial).get("failure_kind")
    # An out-of-memory trial is PRUNED for the sampler's sake; it failed all the same.
    return f"FAIL ({kind})" if kind else trial.state.name


def _unfinished_section(data: ReportData) -> str:
    rows = [
        f"<tr><td>{t.number}</td><td>{_e(_state(t, data))}</td>"
        f"<td>{_e(_params_text(changed_params(t, data.reference)))}</td>"
        f"<td>{_e(_reason(t, data))}</td></tr>"
        for t in data.trials
        if t.state in (TrialState.FAIL, TrialState.PRUNED)
    ]
    if not rows:
        return ""
    head = "<tr><th>trial</th><th>state</th><th>parameters</th><th>reason</th></tr>"
    return (
        "<h2>Trials that did not complete</h2><p>A failed trial keeps its log tail in the "
        "<code>log_tail</code> user attribute and, for new studies, a <code>log_tail.txt</code> "
        "artifact (see <code>autotune dashboard</code>).</p><table>"
        + head
        + "".join(rows)
        + "</table>"
    )


def _figure_html(fig: Any, div_id: str) -> str:
    if fig is None:
        return "<p class='note'>Not enough completed trials with these figures yet.</p>"
    return str(
        fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=div_id,
            config={"displaylogo": False, "responsive": True},
        )
    )


def render(data: ReportData) -> str:
    """The whole report as one HTML document."""
    from plotly.offline import get_plotlyjs

    study = data.study
    counts = {s.name.lower(): sum(t.state == s for t in data.trials) for s in TrialState}
    summary = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
    env = data.environment
    imp = data.importances
    importance = _figure_html(importance_figure(imp), "plot-importance") if imp.by_target else ""
    if imp.by_target:
        importance += f"<p class='note'>Parameter importances {_e(imp.basis)}.</p>"
    if imp.message:
        importance += f"<p class='note'>Parameter importances: {_e(imp.message)}.</p>"
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    env_rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in env.items())
    stored = StudyRecord.of(study)
    notes = [str(n) for n in stored.notes]
    if stored.dummy_weights:
        notes.insert(
            0,
            "measured with random (dummy) weights: speed and memory only, accuracy "
            "was not measured",
        )
    notes.append(f"time: {data.time.line()}")
    if stored.floor_warning:
        notes.append(stored.floor_warning)
    if data.deploy_target:
        notes.append(f"deploy target: {data.deploy_target}")
    notes_html = "".join(f"<p class='note'>note: {_e(n)}</p>" for n in notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>autotune report: {_e(study.study_name)}</title>
<style>{CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>autotune report: {_e(study.study_name)}</h1>
<p class="sub">model {_e(env.get("model", "?"))} · {len(data.trials)} trials ({summary}) ·
generated {generated} by autotune {_e(__version__)}</p>
{notes_html}

{_recommended_section(data)}
{_named_section(data)}

<h2 id="pareto">Pareto front</h2>
{_figure_html(pareto_figure(data), "plot-pareto")}

<h2 id="top">Top configurations</h2>
{_top_section(data)}
{_what_if_section(data)}
{_infeasible_section(data)}

<h2 id="image-side">Accuracy vs image size</h2>
{_figure_html(accuracy_figure(data), "plot-accuracy")}

<h2 id="batch">Latency and throughput vs batch size</h2>
{_figure_html(batch_figure(data), "plot-batch")}

<h2 id="importance">Parameter importances</h2>
{importance}
{_unfinished_section(data)}
<h2 id="environment">Environment</h2>
<table>{env_rows}</table>
</body></html>
"""


def write_report(study_name: str | None, storage_url: str | None, *, out: str | Path) -> Path:
    """Write the report of an existing study to `out`; never creates a database."""
    from optuna.artifacts import FileSystemArtifactStore

    from autotune.study.storage import artifact_dir, default_storage_url, load_study

    output_target(out, "the report")  # refused before the work, not after
    study = load_study(study_name, storage_url)
    url = storage_url or default_storage_url(study.study_name)
    store_dir = artifact_dir(url, study.study_name)
    store = FileSystemArtifactStore(store_dir) if store_dir.is_dir() else None
    document = render(collect(study, artifact_store=store))
    write_text_atomically(out, document, "the report")
    return Path(out)
