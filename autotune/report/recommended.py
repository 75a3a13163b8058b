"""The report's recommendation: the trial, its figures beside the reference's with their
intervals, why the reference itself was recommended when it was, and sample outputs of the
recommended trial, right and wrong."""

from __future__ import annotations

from optuna.trial import FrozenTrial

from autotune.accuracy.floor import interval_label
from autotune.engines.gpus import describe
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.report.cells import (
    FIGURES,
    THROUGHPUT,
    e,
    figure_text,
    fmt,
    params_text,
    set_values,
    tag,
)
from autotune.report.confirmation import confirmation_lines
from autotune.report.data import (
    ReportData,
    changed_params,
    finite,
    reference_why,
    why_no_tpot,
)
from autotune.report.headline import gain_lines
from autotune.report.text import gpu_mismatch
from autotune.study.results.select import tied


def _versus(rec: FrozenTrial, ref: FrozenTrial, key: str, higher_better: bool) -> str:
    """Relative change against the reference, coloured by whether it is an improvement; a
    throughput tied with the reference's (select.tied) is a tie, whatever the points say."""
    v, b = finite(TrialRecord.of(rec).figure(key)), finite(TrialRecord.of(ref).figure(key))
    if v is None or b is None or b == 0:
        return "-"
    change = (v - b) / abs(b)
    if key == THROUGHPUT and tied(rec, ref):
        return f"{change:+.0%} (a tie: the difference lies inside its interval)"
    better = change > 0 if higher_better else change < 0
    css = "good" if better else "bad" if change else ""
    return f'<span class="{css}">{change:+.0%}</span>'


def _figures_table(rec: FrozenTrial, ref: FrozenTrial | None) -> str:
    """The recommendation's figures; beside the reference's unless it is the reference."""
    if ref is not None and ref.number == rec.number:
        ref = None
    head = "<tr><th>figure</th><th>recommended</th>"
    head += "<th>reference</th><th>vs reference</th></tr>" if ref is not None else "</tr>"
    rows = [head]
    for key, label, spec, higher in FIGURES:
        value = figure_text(TrialRecord.of(rec), key, spec)
        cells = f"<td>{e(label)}</td><td class='num'>{e(value)}</td>"
        if ref is not None:
            base = figure_text(TrialRecord.of(ref), key, spec)
            cells += f"<td class='num'>{e(base)}</td>"
            cells += f"<td class='num'>{_versus(rec, ref, key, higher)}</td>"
        rows.append(f"<tr>{cells}</tr>")
    notes = [
        f"<p class='note'>TPOT n/a for trial {t.number}: {e(why)}.</p>"
        for t in ([rec] if ref is None else [rec, ref])
        if (why := why_no_tpot(TrialRecord.of(t))) is not None
    ]
    return "<table>" + "".join(rows) + "</table>" + "".join(notes)


def _paired_line(trial: FrozenTrial) -> str:
    paired = TrialRecord.of(trial).paired_vs_reference
    if paired is None:
        return ""
    conf = finite(paired.confidence) or 0.0
    return (
        f"<p>Accuracy vs reference on the same {e(paired.n_items)} items: "
        f"{fmt(paired.accuracy_diff, '+.3f')} "
        f"({e(interval_label(conf, paired.test))} {fmt(paired.ci_low, '+.3f')} to "
        f"{fmt(paired.ci_high, '+.3f')}; McNemar p = "
        f"{fmt(paired.mcnemar_p, '.3g')})</p>"
    )


def _reference_note(data: ReportData) -> str:
    assert data.recommendation is not None
    lines = reference_why(data.study, data.recommendation, data.complete, data.infeasible)
    items = "".join(f"<li>{e(line)}</li>" for line in lines)
    return (
        "<p><b>The reference itself is recommended</b>: no configuration the study measured was "
        "faster while holding accuracy and reproducing on the deploy target. Why each faster "
        f"one was not chosen:</p><ul class='why-reference'>{items}</ul>"
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
            e(r.get("id")),
            e(r.get("category", "")),
            e(r.get("prompt", "")),
            f"<b>{e(r.get('answer') or '')}</b>",
            e(" | ".join(str(x) for x in refs)),
            f"<span class='{'good' if r.get('passed') else 'bad'}'>"
            f"{fmt(r.get('score'), '.2f')}</span>",
        ]
        if with_ref:
            cells.insert(4, e(data.reference_answers.get(str(r.get("id")), "-")))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    more = data.samples_total - len(data.samples)
    tail = (
        f"<p class='note'>{more} more items in the trial's sample_outputs.json artifact.</p>"
        if more > 0
        else ""
    )
    return "<table class='samples'>" + "".join(rows) + "</table>" + tail


def _samples_heading(data: ReportData, number: int) -> str:
    shown_right = sum(1 for r in data.samples if r.get("passed"))
    return (
        f"<h3>Sample outputs of trial {number}</h3><p class='note'>{data.samples_right} of "
        f"{data.samples_total} answers right; shown: {shown_right} right and "
        f"{len(data.samples) - shown_right} wrong.</p>"
    )


def recommended_section(data: ReportData) -> str:
    rec, ref = data.recommendation, data.reference
    if rec is None:
        return (
            "<h2 id='recommended'>No recommendation yet</h2>"
            f"<p class='note'>{e(data.no_recommendation)}</p>"
        )
    is_reference = ref is not None and ref.number == rec.trial.number
    feasible_note = "" if rec.feasible else " " + tag("best effort", "bad")
    itself = " — the reference itself" if is_reference else ""
    ties = ""
    if rec.ties:
        tied_with = ", ".join(f"trial {t.number}" for t in rec.ties)
        ties = (
            "<p class='note'>Tied on throughput (the difference lies inside its interval): "
            f"{e(tied_with)}.</p>"
        )
    ref_line = (
        f"<p>Reference: trial {ref.number} — "
        f"{e(params_text(set_values(TrialRecord.of(ref).config)))}</p>"
        if ref is not None
        else "<p class='note'>No completed reference trial.</p>"
    )
    params = e(params_text(changed_params(rec.trial, ref)))
    ran_on = describe(TrialRecord.of(rec.trial).gpus)
    unlike = gpu_mismatch(rec.trial, ref)
    where = f"<p>Measured on {e(ran_on)}.</p>" if ran_on else ""
    if unlike:
        where += f"<p class='note'>Its GPU is unlike the reference's: {e(unlike)}.</p>"
    why = _reference_note(data) if is_reference and rec.feasible else ""
    # The recommendation's own accuracy error: the held-out confirmation, or why none.
    dummy = StudyRecord.of(data.study).dummy_weights
    lines = confirmation_lines(rec, dummy_weights=dummy)
    guarantee = "".join(f"<p>{e(line)}</p>" for line in lines)
    gain = gain_lines(data.study, rec.trial, data.gpu_price_per_hour)
    return (
        f"<h2 id='recommended'>Recommended: trial {rec.trial.number}{itself}{feasible_note}</h2>"
        + "".join(f"<p class='gain'><strong>{e(line)}</strong></p>" for line in gain)
        + f"<p>{e(rec.reason)}. Parameters: <code>{params}</code></p>{guarantee}{why}{where}{ties}"
        f"<div class='grid'><div>{_figures_table(rec.trial, ref)}{_paired_line(rec.trial)}"
        f"{ref_line}</div><div>{_samples_heading(data, rec.trial.number)}"
        f"{_samples_table(data)}</div></div>"
    )
