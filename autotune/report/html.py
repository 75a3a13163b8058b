"""`autotune report`: one self-contained HTML file to attach to a pull request.

Plotly's JavaScript is embedded once, inline, so the file opens offline and nothing is
fetched from a CDN. Data comes from data.py, figures from plots.py, the recommendation from
recommended.py and the tables of trials from tables.py.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from autotune import __version__
from autotune.accuracy.timed import TIMED_NOTE, timed_study
from autotune.records.stored import StudyRecord
from autotune.report.cells import e
from autotune.report.data import ReportData, collect
from autotune.report.output import output_target, write_text_atomically
from autotune.report.plots import accuracy_figure, batch_figure, importance_figure, pareto_figure
from autotune.report.recommended import recommended_section
from autotune.report.tables import (
    infeasible_section,
    named_section,
    repeats_note,
    top_section,
    unfinished_section,
    what_if_section,
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
    env = data.environment
    imp = data.importances
    importance = _figure_html(importance_figure(imp), "plot-importance") if imp.by_target else ""
    if imp.by_target:
        importance += f"<p class='note'>Parameter importances {e(imp.basis)}.</p>"
    if imp.message:
        importance += f"<p class='note'>Parameter importances: {e(imp.message)}.</p>"
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    env_rows = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in env.items())
    stored = StudyRecord.of(study)
    notes = [str(n) for n in stored.notes]
    if stored.dummy_weights:
        notes.insert(
            0,
            "measured with random (dummy) weights: speed and memory only, accuracy "
            "was not measured",
        )
    if timed_study(study):
        notes.insert(1, f"{TIMED_NOTE} (its pass is in the time split; no verdict)")
    notes.append(f"time: {data.time.line()}")
    if stored.floor_warning:
        notes.append(stored.floor_warning)
    if data.deploy_target:
        notes.append(f"deploy target: {data.deploy_target}")
    notes_html = "".join(f"<p class='note'>note: {e(n)}</p>" for n in notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>autotune report: {e(study.study_name)}</title>
<style>{CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>autotune report: {e(study.study_name)}</h1>
<p class="sub">model {e(env.get("model", "?"))} ·
generated {generated} by autotune {e(__version__)}</p>
<p class="counts">{e(data.counts.line())}</p>
{repeats_note(data)}
{notes_html}

{recommended_section(data)}
{named_section(data)}

<h2 id="pareto">Pareto front</h2>
{_figure_html(pareto_figure(data), "plot-pareto")}

<h2 id="top">Top configurations</h2>
{top_section(data)}
{what_if_section(data)}
{infeasible_section(data)}

<h2 id="image-side">Accuracy vs image size</h2>
{_figure_html(accuracy_figure(data), "plot-accuracy")}

<h2 id="batch">Latency and throughput vs batch size</h2>
{_figure_html(batch_figure(data), "plot-batch")}

<h2 id="importance">Parameter importances</h2>
{importance}
{unfinished_section(data)}
<h2 id="environment">Environment</h2>
<table>{env_rows}</table>
</body></html>
"""


def write_report(
    study_name: str | None,
    storage_url: str | None,
    *,
    out: str | Path,
    gpu_price_per_hour: float | None = None,
) -> Path:
    """Write the report of an existing study to `out`; never creates a database.
    `gpu_price_per_hour` (USD): the cost per million tokens, over the space's price."""
    from optuna.artifacts import FileSystemArtifactStore

    from autotune.study.store.storage import artifact_dir, default_storage_url, load_study

    output_target(out, "the report")  # refused before the work, not after
    study = load_study(study_name, storage_url)
    url = storage_url or default_storage_url(study.study_name)
    store_dir = artifact_dir(url, study.study_name)
    store = FileSystemArtifactStore(store_dir) if store_dir.is_dir() else None
    document = render(collect(study, artifact_store=store, gpu_price_per_hour=gpu_price_per_hour))
    write_text_atomically(out, document, "the report")
    return Path(out)
