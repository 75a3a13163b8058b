"""The report's Plotly figures, built from trial user attributes (units in the names).

Figures are built from plain lists, not numpy arrays, so their data is readable in the HTML
(Plotly encodes arrays as base64) and a test can find the figures in the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from optuna.trial import FrozenTrial

from autotune.measure.registry import THROUGHPUT
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.report.data import Importances, ReportData, changed_params, finite, params_words
from autotune.study.results.select import (
    CONSTRAINT_NAMES,
    constraint_values,
    is_feasible,
    throughput_interval,
)

P95 = "e2e_latency_p95_ms"
FEASIBLE_COLOUR = "#1f77b4"
INFEASIBLE_COLOUR = "#d62728"
GROUPS = ((True, "feasible", FEASIBLE_COLOUR), (False, "infeasible", INFEASIBLE_COLOUR))
LAYOUT: dict[str, Any] = {
    "template": "plotly_white",
    "height": 440,
    "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
    "legend": {"orientation": "h", "y": -0.18},
}


def _go() -> Any:
    import plotly.graph_objects as go

    return go


def _hover(trial: FrozenTrial, data: ReportData) -> str:
    record = TrialRecord.of(trial)
    lines = [f"trial {trial.number}" + (" (reference)" if record.is_reference else "")]
    lines += params_words(changed_params(trial, data.reference)).split()
    for key, label in ((THROUGHPUT, "tok/s"), (P95, "p95 ms"), ("accuracy", "accuracy")):
        value = finite(record.figure(key))
        lines.append(f"{label}: {value:.4g}" if value is not None else f"{label}: -")
    violated = [n for n, v in zip(CONSTRAINT_NAMES, constraint_values(trial), strict=True) if v > 0]
    if violated:
        lines.append("violates: " + ", ".join(violated))
    return "<br>".join(lines)


def _points(trials: Iterable[FrozenTrial], x_key: str, y_key: str) -> list[FrozenTrial]:
    return [
        t
        for t in trials
        if finite(TrialRecord.of(t).figure(x_key)) is not None
        and finite(TrialRecord.of(t).figure(y_key)) is not None
    ]


def _accuracy_range(trials: list[FrozenTrial]) -> dict[str, float]:
    """Colour range over the measured accuracies, never wider than 0..1 nor a single value."""
    values = [v for t in trials if (v := finite(TrialRecord.of(t).accuracy)) is not None]
    if not values:
        return {}
    low, high = min(values), max(values)
    if high - low < 0.02:
        low, high = low - 0.05, high + 0.05
    return {"cmin": max(0.0, low), "cmax": min(1.0, high)}


def throughput_bars(trials: list[FrozenTrial], colour: str = "#555") -> dict[str, Any]:
    """Error bars of each trial's 95% throughput interval (none where it recorded none): ties
    are decided by them, so a reader sees which points are apart."""
    ups, downs = [], []
    for trial in trials:
        value = finite(TrialRecord.of(trial).figure(THROUGHPUT))
        bounds = throughput_interval(trial)
        if value is None or bounds is None:
            ups.append(0.0)
            downs.append(0.0)
            continue
        ups.append(round(bounds[1] - value, 6))
        downs.append(round(value - bounds[0], 6))
    return {
        "type": "data",
        "symmetric": False,
        "array": ups,
        "arrayminus": downs,
        "color": colour,
        "thickness": 1.2,
    }


UNMEASURED_COLOUR = "#999999"


def _by_accuracy(trials: list[FrozenTrial]) -> list[tuple[str | None, list[FrozenTrial]]]:
    """(None, trials coloured by their accuracy), (a fixed colour, trials without one); only
    the non-empty ones."""
    measured = [t for t in trials if finite(TrialRecord.of(t).accuracy) is not None]
    unmeasured = [t for t in trials if finite(TrialRecord.of(t).accuracy) is None]
    groups = ((None, measured), (UNMEASURED_COLOUR, unmeasured))
    return [(colour, group) for colour, group in groups if group]


def pareto_figure(data: ReportData) -> Any:
    """Throughput against p95 latency; colour = accuracy, x = infeasible, line = front."""
    go = _go()
    fig = go.Figure()
    points = _points(data.complete, P95, THROUGHPUT)
    what_ifs = {t.number for t, _ in data.what_ifs}

    def kind(trial: FrozenTrial) -> str:
        if not is_feasible(trial):
            return "infeasible"
        return "what-if" if trial.number in what_ifs else "feasible"

    for wanted, name, symbol in (
        ("feasible", "feasible, deployable", "circle"),
        ("what-if", "what-if (not deployable)", "diamond"),
        ("infeasible", "infeasible", "x"),
    ):
        group = [t for t in points if kind(t) == wanted]
        # Plotly takes no gap in a colour scale: trials without an accuracy (a dummy-weights
        # study measures none) are a trace of their own, in grey.
        for colour, trials in _by_accuracy(group):
            label = name if colour is None else f"{name}, accuracy not measured"
            fig.add_trace(
                go.Scatter(
                    x=[TrialRecord.of(t).figure(P95) for t in trials],
                    y=[TrialRecord.of(t).figure(THROUGHPUT) for t in trials],
                    error_y=throughput_bars(trials),
                    mode="markers+text",
                    name=label,
                    text=[str(t.number) for t in trials],
                    textposition="top center",
                    hovertext=[_hover(t, data) for t in trials],
                    hoverinfo="text",
                    customdata=[t.number for t in trials],
                    marker={
                        "symbol": symbol,
                        "size": 13,
                        "line": {"width": 1, "color": "#333"},
                        **(
                            {"color": colour}
                            if colour is not None
                            else {
                                "color": [finite(TrialRecord.of(t).accuracy) for t in trials],
                                "coloraxis": "coloraxis",
                            }
                        ),
                    },
                )
            )
    rec = data.recommendation
    front = sorted(
        _points(rec.front if rec else [], P95, THROUGHPUT),
        key=lambda t: TrialRecord.of(t).figure(P95) or 0.0,
    )
    if len(front) > 1:
        fig.add_trace(
            go.Scatter(
                x=[TrialRecord.of(t).figure(P95) for t in front],
                y=[TrialRecord.of(t).figure(THROUGHPUT) for t in front],
                mode="lines",
                name="feasible Pareto front",
                line={"dash": "dot", "color": "#555", "shape": "hv"},
                hoverinfo="skip",
            )
        )
    marks = [(rec.trial, "recommended", "circle-open", 26, "#2ca02c")] if rec else []
    if data.reference is not None:
        marks.append((data.reference, "reference", "star-open", 24, "#ff7f0e"))
    for trial, name, symbol, size, colour in marks:
        if not _points([trial], P95, THROUGHPUT):
            continue
        fig.add_trace(
            go.Scatter(
                x=[TrialRecord.of(trial).figure(P95)],
                y=[TrialRecord.of(trial).figure(THROUGHPUT)],
                mode="markers",
                name=f"{name} (trial {trial.number})",
                marker={"symbol": symbol, "size": size, "color": colour, "line": {"width": 3}},
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        **LAYOUT,
        title="Throughput (bars: 95% interval) vs p95 latency (up and left is better)",
        xaxis_title="e2e latency p95 (ms)",
        yaxis_title="output tokens / s",
        coloraxis={
            "colorscale": "Viridis",
            "colorbar": {"title": {"text": "accuracy"}},
            **_accuracy_range(points),
        },
    )
    return fig


def _side_label(side: Any) -> str:
    return "full" if side is None else str(side)


def _config_value(trial: FrozenTrial, name: str) -> Any:
    return TrialRecord.of(trial).config.get(name, trial.params.get(name))


def _category_order(values: Iterable[Any]) -> list[str]:
    distinct = set(values)
    numbers = sorted(v for v in distinct if isinstance(v, (int, float)))
    return [str(v) for v in numbers] + (["full"] if None in distinct else [])


def _accuracy_settings(data: ReportData) -> dict[str, Any]:
    constraints = StudyRecord.of(data.study).space.get("constraints") or {}
    return constraints.get("accuracy") or {}


def _accuracy_floor(data: ReportData) -> float | None:
    accuracy = _accuracy_settings(data)
    if not accuracy.get("enabled", True):
        return None
    if accuracy.get("mode") == "absolute":
        return finite(accuracy.get("min"))
    ref = finite(TrialRecord.of(data.reference).accuracy) if data.reference else None
    drop = finite(accuracy.get("max_drop"))
    return ref - drop if ref is not None and drop is not None else None


def _paired_confidence(data: ReportData) -> float | None:
    """The confidence of the paired interval the floor judged each trial by; None where it
    judged points (an absolute floor, `test: point`) or there is no floor."""
    accuracy = _accuracy_settings(data)
    if not accuracy.get("enabled", True) or accuracy.get("mode", "relative") != "relative":
        return None
    if accuracy.get("test") == "point":
        return None
    return finite(accuracy.get("confidence")) or 0.95


def _lower_end(data: ReportData, confidence: float) -> str:
    """What the bar's lower end is: a one-sided bound at the floor's confidence under the
    sequential test; a two-sided interval's end, one-sided at (1 + confidence) / 2, else."""
    if _accuracy_settings(data).get("test", "sequential") == "sequential":
        return f"a one-sided {confidence:.0%} bound"
    return f"the end of a two-sided {confidence:.0%} interval"


def paired_bar(trial: FrozenTrial) -> tuple[float, float]:
    """How far the trial's paired interval, placed on the accuracy axis, reaches above and
    below its point: the reference's accuracy plus [ci_low, ci_high] of the difference."""
    paired = TrialRecord.of(trial).paired_vs_reference
    ends = (paired.accuracy_diff, paired.ci_low, paired.ci_high) if paired else (None,) * 3
    diff, low, high = (finite(value) for value in ends)
    if diff is None or low is None or high is None:
        return 0.0, 0.0  # the reference itself, or a trial judged before the paired test
    return max(0.0, high - diff), max(0.0, diff - low)


def accuracy_figure(data: ReportData) -> Any | None:
    """Accuracy against image_max_side, one point per completed trial. Under a paired floor
    each point carries its paired interval: the floor is applied to the bar's lower end, so a
    point can sit above the line and still be infeasible."""
    go = _go()
    trials = [t for t in data.complete if finite(TrialRecord.of(t).accuracy) is not None]
    if not trials:
        return None
    order = _category_order(_config_value(t, "image_max_side") for t in trials)
    confidence = _paired_confidence(data)
    fig = go.Figure()
    for feasible, name, colour in GROUPS:
        group = [t for t in trials if is_feasible(t) == feasible]
        if group:
            bars = [paired_bar(t) for t in group]
            error_y = {
                "type": "data",
                "symmetric": False,
                "array": [up for up, _ in bars],
                "arrayminus": [down for _, down in bars],
                "color": colour,
                "visible": confidence is not None,
            }
            fig.add_trace(
                go.Scatter(
                    x=[_side_label(_config_value(t, "image_max_side")) for t in group],
                    y=[TrialRecord.of(t).accuracy for t in group],
                    error_y=error_y,
                    mode="markers",
                    name=name,
                    marker={"size": 11, "color": colour, "opacity": 0.8},
                    hovertext=[_hover(t, data) for t in group],
                    hoverinfo="text",
                    customdata=[t.number for t in group],
                )
            )
    floor = _accuracy_floor(data)
    if floor is not None:
        applied = (
            f": the lower end of the paired interval (bar; {_lower_end(data, confidence)}) "
            "must clear it"
            if confidence is not None
            else ""
        )
        fig.add_hline(
            y=floor,
            line_dash="dash",
            line_color="#888",
            annotation_text=f"floor {floor:.3f}{applied}",
        )
    fig.update_layout(
        **LAYOUT,
        title="Accuracy vs image max side",
        xaxis={
            "title": "image_max_side (px)",
            "type": "category",
            "categoryorder": "array",
            "categoryarray": order,
        },
        yaxis_title="accuracy",
    )
    return fig


def batch_figure(data: ReportData) -> Any | None:
    """Throughput and p95 latency against batch size, side by side."""
    go = _go()
    from plotly.subplots import make_subplots

    trials = _points(data.complete, P95, THROUGHPUT)
    if not trials:
        return None
    order = _category_order(_config_value(t, "batch_size") for t in trials)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("throughput", "p95 e2e latency"))
    for feasible, name, colour in GROUPS:
        group = [t for t in trials if is_feasible(t) == feasible]
        for col, key in ((1, THROUGHPUT), (2, P95)):
            if not group:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[str(_config_value(t, "batch_size")) for t in group],
                    y=[TrialRecord.of(t).figure(key) for t in group],
                    error_y=throughput_bars(group, colour) if key == THROUGHPUT else None,
                    mode="markers",
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    marker={"size": 11, "color": colour, "opacity": 0.8},
                    hovertext=[_hover(t, data) for t in group],
                    hoverinfo="text",
                    customdata=[t.number for t in group],
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(
        type="category", categoryorder="array", categoryarray=order, title_text="batch_size"
    )
    fig.update_yaxes(title_text="output tokens / s", row=1, col=1)
    fig.update_yaxes(title_text="ms", row=1, col=2)
    fig.update_layout(**LAYOUT, title="Throughput and latency vs batch size")
    return fig


def importance_figure(imp: Importances) -> Any | None:
    """Horizontal bars: PED-ANOVA importance of each parameter, one colour per objective."""
    if not imp.by_target:
        return None
    go = _go()
    params = sorted({p for values in imp.by_target.values() for p in values})
    fig = go.Figure()
    for target, values in imp.by_target.items():
        fig.add_trace(
            go.Bar(
                y=params,
                x=[round(values.get(p, 0.0), 4) for p in params],
                orientation="h",
                name=target,
            )
        )
    layout = {**LAYOUT, "height": max(300, 90 + 40 * len(params) * len(imp.by_target))}
    fig.update_layout(
        **layout,
        barmode="group",
        title=f"Parameter importance (PED-ANOVA, per objective, {imp.trials} trials)",
        xaxis_title="importance (normalised)",
    )
    return fig
