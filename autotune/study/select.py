"""Reading results back: feasibility, the Pareto front and the recommended trial.

Feasibility is read from the constraint values each trial stored (Optuna's convention: a trial
is feasible when every value is <= 0), so `best`, `export`, `report` and `verify` agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StudyError

CONSTRAINT_NAMES = ("accuracy", "memory", "latency")


def constraint_values(trial: FrozenTrial) -> list[float]:
    """Always three values in CONSTRAINT_NAMES order; unmeasured means infeasible."""
    stored = trial.user_attrs.get("constraints")
    if not stored:
        return [1.0, 0.0, 0.0]
    return [float(stored.get(name, 0.0)) for name in CONSTRAINT_NAMES]


def is_feasible(trial: FrozenTrial) -> bool:
    return trial.state == TrialState.COMPLETE and all(v <= 0 for v in constraint_values(trial))


def objective_names(study: optuna.Study) -> list[str]:
    return list(study.user_attrs.get("objective_metrics", [])) or [
        f"objective_{i}" for i in range(len(study.directions))
    ]


def _dominates(a: list[float], b: list[float], signs: list[float]) -> bool:
    better_or_equal = all(sa * x >= sa * y for x, y, sa in zip(a, b, signs, strict=True))
    strictly = any(sa * x > sa * y for x, y, sa in zip(a, b, signs, strict=True))
    return better_or_equal and strictly


def pareto_front(trials: list[FrozenTrial], directions: list[str]) -> list[FrozenTrial]:
    signs = [1.0 if d == "maximize" else -1.0 for d in directions]
    front = []
    for trial in trials:
        if not any(
            _dominates(other.values, trial.values, signs) for other in trials if other is not trial
        ):
            front.append(trial)
    return sorted(front, key=lambda t: t.number)


@dataclass
class Recommendation:
    trial: FrozenTrial
    feasible: bool
    reason: str
    front: list[FrozenTrial]


def _direction_names(study: optuna.Study) -> list[str]:
    return [d.name.lower() for d in study.directions]


def has_completed_trial(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def recommend(study: optuna.Study) -> Recommendation:
    """The feasible Pareto trial best on the first objective; else the least-violating trial."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        raise StudyError(f"study '{study.study_name}' has no completed trial yet")
    directions = _direction_names(study)
    names = objective_names(study)
    feasible = [t for t in complete if is_feasible(t)]
    primary_sign = 1.0 if directions[0] == "maximize" else -1.0
    if feasible:
        front = pareto_front(feasible, directions)
        best = max(front, key=lambda t: (primary_sign * t.values[0], -t.number))
        return Recommendation(
            trial=best,
            feasible=True,
            reason=f"best {names[0]} on the feasible Pareto front",
            front=front,
        )
    least = min(
        complete,
        key=lambda t: (sum(max(v, 0.0) for v in constraint_values(t)), -primary_sign * t.values[0]),
    )
    return Recommendation(
        trial=least,
        feasible=False,
        reason="no trial meets every constraint; this one violates them least (best effort)",
        front=[],
    )


def find_trial(study: optuna.Study, number: int) -> FrozenTrial:
    for trial in study.get_trials(deepcopy=False):
        if trial.number == number:
            if trial.state != TrialState.COMPLETE:
                raise StudyError(f"trial {number} did not complete (state {trial.state.name})")
            return trial
    raise StudyError(f"study '{study.study_name}' has no trial {number}")


def reference_trial(study: optuna.Study) -> FrozenTrial | None:
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if trial.user_attrs.get("is_reference"):
            return trial
    return None
