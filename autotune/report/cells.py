"""The report's table cells: escaped text, each figure with its unit, throughput with its 95%
interval (ties are decided by it), "n/a" with the reason where a figure cannot be computed."""

from __future__ import annotations

import html
from typing import Any

from optuna.trial import FrozenTrial

from autotune.measure.registry import THROUGHPUT
from autotune.records.stored import TrialRecord
from autotune.report.data import finite, params_words, why_no_tpot

# (user attribute, label, format, higher is better) for the figures tables.
FIGURES: tuple[tuple[str, str, str, bool], ...] = (
    (THROUGHPUT, "throughput (tok/s, 95% CI)", ".1f", True),
    ("e2e_latency_p95_ms", "e2e p95 (ms)", ".0f", False),
    ("ttft_p50_ms", "TTFT p50 (ms)", ".0f", False),
    ("tpot_p50_ms", "TPOT p50 (ms)", ".1f", False),
    ("accuracy", "accuracy (items answered)", ".3f", True),
    ("peak_memory_mib", "peak memory (MiB)", ".0f", False),
    ("startup_s", "start-up (s)", ".1f", False),
)
# The figures of a row in the trial tables (start-up is the recommendation's table only).
ROW_FIGURES = FIGURES[:6]


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any, spec: str) -> str:
    number = finite(value)
    return format(number, spec) if number is not None else "-"


def params_text(params: dict[str, Any]) -> str:
    return params_words(params) or "(reference configuration)"


def set_values(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if v is not None}


def interval_text(record: TrialRecord) -> str:
    """' ±10.4%' for a recorded throughput interval, ' (no interval)' where the load test
    could not give one, '' where none was recorded at all."""
    rel = record.figure("throughput_ci_rel")
    if rel is None:
        return ""
    return f" ±{rel:.1%}" if finite(rel) is not None else " (no interval)"


def figure_text(record: TrialRecord, key: str, spec: str) -> str:
    """A figure as text: '-' when not recorded, 'n/a' when recorded as not computable."""
    value = record.figure(key)
    if key == "accuracy" and record.accuracy_not_judged is not None:
        return "not judged"  # its answers could not change the recommendation
    if value is None:
        return "-"
    text = fmt(value, spec) if finite(value) is not None else "n/a"
    if key == "accuracy" and record.item_scores:
        # The sequential floor stops each trial where its verdict is decided: how many items
        # the figure rests on is part of it.
        return f"{text} ({len(record.item_scores)} items)"
    return text + interval_text(record) if key == THROUGHPUT and text != "n/a" else text


def figure_cell(trial: FrozenTrial, key: str, spec: str) -> str:
    record = TrialRecord.of(trial)
    why = why_no_tpot(record) if key == "tpot_p50_ms" else None
    title = f" title='TPOT n/a: {e(why)}'" if why else ""
    return f"<td class='num'{title}>{e(figure_text(record, key, spec))}</td>"


def figure_cells(trial: FrozenTrial) -> str:
    return "".join(figure_cell(trial, key, spec) for key, _, spec, _ in ROW_FIGURES)


def figure_heads() -> str:
    return "".join(f"<th>{e(label)}</th>" for _, label, _, _ in ROW_FIGURES)


def tag(text: str, css: str = "") -> str:
    return f"<span class='tag{' ' + css if css else ''}'>{e(text)}</span>"


def trial_label(trial: FrozenTrial, tags: list[str]) -> str:
    return str(trial.number) + "".join(tag(t) for t in tags)
