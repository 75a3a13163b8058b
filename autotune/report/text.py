"""`autotune best`: the feasible Pareto front and the recommendation, as a table or JSON."""

from __future__ import annotations

import io
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console
from rich.table import Table

from autotune.params import PARAM_NAMES
from autotune.study.select import constraint_values, is_feasible, objective_names, recommend

HEADLINE = (
    "throughput_output_tokens_per_s",
    "e2e_latency_p95_ms",
    "ttft_p50_ms",
    "tpot_p50_ms",
    "accuracy",
    "peak_memory_mib",
)


def trial_summary(trial: FrozenTrial) -> dict[str, Any]:
    attrs = trial.user_attrs
    return {
        "trial": trial.number,
        "state": trial.state.name,
        "reference": bool(attrs.get("is_reference")),
        "feasible": is_feasible(trial),
        "constraints": dict(attrs.get("constraints") or {}),
        "figures": {name: attrs.get(name) for name in HEADLINE},
        "config": attrs.get("config"),
    }


def best_json(study: optuna.Study) -> dict[str, Any]:
    rec = recommend(study)
    states = [t.state for t in study.get_trials(deepcopy=False)]
    return {
        "study": study.study_name,
        "objectives": dict(
            zip(objective_names(study), [d.name.lower() for d in study.directions], strict=True)
        ),
        "trials": {s.name: states.count(s) for s in TrialState if states.count(s)},
        "dummy_weights": bool(study.user_attrs.get("dummy_weights")),
        "feasible_found": rec.feasible,
        "recommended": trial_summary(rec.trial),
        "reason": rec.reason,
        "pareto_front": [trial_summary(t) for t in rec.front],
    }


def _cell(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def _changed_params(trial: FrozenTrial) -> str:
    config = trial.user_attrs.get("config") or {}
    keys = [k for k in PARAM_NAMES if k in trial.params]
    return " ".join(f"{k}={config.get(k)}" for k in keys)


def best_text(study: optuna.Study) -> str:
    rec = recommend(study)
    table = Table(title=f"study '{study.study_name}': feasible Pareto front", title_justify="left")
    for header in (
        "trial",
        "tok/s",
        "p95 e2e ms",
        "TTFT p50 ms",
        "TPOT p50 ms",
        "accuracy",
        "peak MiB",
        "parameters",
    ):
        table.add_column(header, overflow="fold")
    for trial in rec.front:
        a = trial.user_attrs
        marker = "*" if trial.number == rec.trial.number else ""
        ref = " (ref)" if a.get("is_reference") else ""
        table.add_row(
            f"{trial.number}{marker}{ref}",
            _cell(a.get("throughput_output_tokens_per_s"), ".1f"),
            _cell(a.get("e2e_latency_p95_ms"), ".0f"),
            _cell(a.get("ttft_p50_ms"), ".0f"),
            _cell(a.get("tpot_p50_ms"), ".1f"),
            _cell(a.get("accuracy"), ".3f"),
            _cell(a.get("peak_memory_mib"), ".0f"),
            _changed_params(trial),
        )
    buffer = io.StringIO()
    console = Console(file=buffer, width=140, highlight=False)
    if rec.front:
        console.print(table)
    else:
        console.print(f"study '{study.study_name}': no feasible trial")
        violations = dict(
            zip(("accuracy", "memory", "latency"), constraint_values(rec.trial), strict=True)
        )
        console.print(f"  constraint violations of the best effort: {violations}")
    if study.user_attrs.get("dummy_weights"):
        console.print(
            "dummy weights: random weights of the real architecture; speed figures only, "
            "accuracy not measured"
        )
    console.print(f"recommended: trial {rec.trial.number} — {rec.reason}")
    console.print(f"  {_changed_params(rec.trial) or '(reference configuration)'}")
    console.print(
        f"  export: autotune export --study {study.study_name} --trial {rec.trial.number} "
        "--format swift|lmdeploy|vllm|yaml"
    )
    return buffer.getvalue().rstrip()


def failures_text(study: optuna.Study) -> str:
    """Why each trial of a study without a completed one ended, one line each."""
    lines = [f"study '{study.study_name}': no trial completed"]
    for trial in study.get_trials(deepcopy=False):
        reason = trial.user_attrs.get("failure_reason") or trial.state.name.lower()
        lines.append(f"  trial {trial.number} {trial.state.name}: {reason}")
    return "\n".join(lines)
