"""Reading results back: feasibility, deployability, the Pareto front and the recommendation.

Feasibility is read from the constraint values each trial stored (Optuna's convention: a trial
is feasible when every value is <= 0), so `best`, `export`, `report` and `verify` agree. Only
trials whose export to the study's deploy target reproduces their measurement can be
recommended (autotune.export.reproduce); the others are what-ifs, listed apart with the reason.
Two trials whose throughput difference lies inside its own 95% interval are a tie, decided by
the next objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.backends import BACKENDS, PLUGIN_GROUP
from autotune.errors import StudyError
from autotune.export.reproduce import Reproduction, reproduction
from autotune.measure.equal_work import UNEQUAL_WORK
from autotune.records.machine import trial_machine
from autotune.records.parts import Confirmed
from autotune.records.readable import completed_unreadable, is_stand_in, unreadable_line
from autotune.records.repeats import measured as measured_trials
from autotune.records.stored import StudyRecord, TrialRecord

# The constraints that decide feasibility. Trials also carry a "deployable" constraint for the
# sampler (so it learns where deployable configurations are); it is not a feasibility limit.
CONSTRAINT_NAMES = ("accuracy", "memory", "latency")
DEPLOYABLE = "deployable"
# The attribute a trial records its held-out confirmation under (autotune.accuracy.confirm).
CONFIRMATION = "confirmation"
# How a what-if that did not do the forced work says so (split_equal_work).
UNEQUAL_PREFIX = "unequal work: "


def constraint_values(trial: FrozenTrial) -> list[float]:
    """Always three values in CONSTRAINT_NAMES order; unmeasured means infeasible."""
    stored = TrialRecord.of(trial).constraints
    if not stored:
        return [1.0, 0.0, 0.0]
    return [float(stored.get(name, 0.0)) for name in CONSTRAINT_NAMES]


def is_feasible(trial: FrozenTrial) -> bool:
    """Every constraint value <= 0 and its accuracy judged: a trial whose accuracy was not
    judged (autotune.study.run.accuracy_gate) has a constraint of 0, unknown, not met."""
    return (
        trial.state == TrialState.COMPLETE
        and all(v <= 0 for v in constraint_values(trial))
        and TrialRecord.of(trial).accuracy_not_judged is None
    )


def objective_names(study: optuna.Study) -> list[str]:
    return list(StudyRecord.of(study).objective_metrics) or [
        f"objective_{i}" for i in range(len(study.directions))
    ]


def infeasible_trials(study: optuna.Study, complete: list[FrozenTrial]) -> dict[int, list[str]]:
    """Of completed trials: every measured (not copied) infeasible one and why, by number."""
    every = study.get_trials(deepcopy=False)
    return {
        t.number: reasons
        for t in measured_trials(complete, every)
        if (reasons := infeasibility(study, t))
    }


def infeasibility(study: optuna.Study, trial: FrozenTrial) -> list[str]:
    """Why a completed trial is infeasible, in words ([] when it is feasible)."""
    if trial.state != TrialState.COMPLETE or is_feasible(trial):
        return []
    record = TrialRecord.of(trial)
    stored = record.infeasible_because
    if stored:
        return list(stored)
    from autotune.accuracy.floor import infeasible_because
    from autotune.space import Constraints

    space = StudyRecord.of(study).space
    constraints = Constraints.model_validate(space.get("constraints") or {})
    return infeasible_because(record, constraints) or ["no constraint values recorded"]


def deploy_target(study: optuna.Study) -> str | None:
    """The study's deploy target; None for an endpoint study (and "swift" for old studies)."""
    record = StudyRecord.of(study)
    if record.endpoint:
        return None
    target = str(record.deploy_target or record.space.get("deploy") or "swift")
    if target not in BACKENDS:
        raise StudyError(
            f"study {study.study_name!r} deploys with the engine {target!r}, which is not "
            f"registered here (engines: {', '.join(BACKENDS)}); install the package that adds "
            f"it (an entry point in the group {PLUGIN_GROUP!r})"
        )
    return target


def trial_reproduction(study: optuna.Study, trial: FrozenTrial) -> Reproduction:
    return reproduction(TrialRecord.of(trial), deploy_target(study))


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


def throughput_interval(
    trial: FrozenTrial, *, same_launch: bool = False
) -> tuple[float, float] | None:
    """The trial's throughput interval (tokens/s), when it recorded one. `same_launch`: the
    load test's own interval, for comparing trials measured on one launch (the spread between
    launches is common to both)."""
    record = TrialRecord.of(trial)
    value = record.figure("throughput_output_tokens_per_s")
    rel = record.figure("throughput_ci_rel")
    within = record.figure("throughput_ci_within_rel")
    if same_launch and within is not None:
        rel = within
    if value is None or rel is None or not math.isfinite(rel):
        return None
    return value * (1 - rel), value * (1 + rel)


def tied(a: FrozenTrial, b: FrozenTrial) -> bool:
    """Whether neither trial is known to be faster: their throughput difference lies inside
    its 95% interval (the two half-widths added in quadrature: independent measurements), or
    one measured too briefly to have an interval (NaN: its figure alone proves nothing).

    Not "the two intervals overlap": that test ties figures up to the sum of the half-widths
    apart, a 99.4% test of the difference, and with the spread between launches in both it
    tied a configuration 13% slower to the best in the replay benchmark, which p95 then chose."""
    launch = TrialRecord.of(a).launch_id
    same = launch is not None and launch == TrialRecord.of(b).launch_id
    ia, ib = throughput_interval(a, same_launch=same), throughput_interval(b, same_launch=same)
    if ia is None or ib is None:
        return _too_short_for_an_interval(a) or _too_short_for_an_interval(b)
    (a_low, a_high), (b_low, b_high) = ia, ib
    difference = abs((a_low + a_high) - (b_low + b_high)) / 2
    return difference <= math.hypot((a_high - a_low) / 2, (b_high - b_low) / 2)


def _too_short_for_an_interval(trial: FrozenTrial) -> bool:
    rel = TrialRecord.of(trial).figure("throughput_ci_rel")
    return rel is not None and not math.isfinite(rel)


@dataclass
class Recommendation:
    trial: FrozenTrial
    feasible: bool
    reason: str
    front: list[FrozenTrial]
    target: str | None = None
    ties: list[FrozenTrial] = field(default_factory=list)
    what_ifs: list[tuple[FrozenTrial, str]] = field(default_factory=list)
    # The best of the feasible front on the first objective (None without a feasible trial):
    # the recommendation, unless a trial tied with it wins on the next objective.
    top: FrozenTrial | None = None
    # The held-out confirmation (autotune.accuracy.confirm): the most often the recommended
    # trial loses max_drop or more (None: no bound, unconfirmed or confirmation off), the
    # verdict that confirmed it, the study's held-out slice, and the faster trials the floor
    # passed that were not confirmed, each with why.
    error_bound: float | None = None
    confirmation: Confirmed | None = None
    holdout: dict[str, Any] | None = None
    passed_over: list[tuple[FrozenTrial, str]] = field(default_factory=list)


class NoDeployableTrial(StudyError):
    """Completed trials exist, but none reproduces on the deploy target."""

    def __init__(self, message: str, what_ifs: list[tuple[FrozenTrial, str]]) -> None:
        super().__init__(message)
        self.what_ifs = what_ifs


def _direction_names(study: optuna.Study) -> list[str]:
    return [d.name.lower() for d in study.directions]


def has_completed_trial(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def split_deployable(
    study: optuna.Study, trials: list[FrozenTrial]
) -> tuple[list[FrozenTrial], list[tuple[FrozenTrial, str]]]:
    """(trials that reproduce on the deploy target, [(what-if, why not)])."""
    deployable, what_ifs = [], []
    for trial in trials:
        check = trial_reproduction(study, trial)
        if check.deployable:
            deployable.append(trial)
        else:
            what_ifs.append((trial, check.reason))
    return deployable, what_ifs


def split_equal_work(
    trials: list[FrozenTrial],
) -> tuple[list[FrozenTrial], list[tuple[FrozenTrial, str]]]:
    """(trials that did the forced work, [(trial, why not)]): one whose answers were not the
    forced length is never ranked with the others on tokens per second."""
    equal, unequal = [], []
    for trial in trials:
        why = (TrialRecord.of(trial).model_extra or {}).get(UNEQUAL_WORK)
        if isinstance(why, str) and why:
            unequal.append((trial, f"{UNEQUAL_PREFIX}{why}"))
        else:
            equal.append(trial)
    return equal, unequal


@dataclass(frozen=True)
class FrontTop:
    """The feasible Pareto front, its top on the first objective, and the trial recommended
    from it: the top, or a trial tied with it that is better on the next objective."""

    top: FrozenTrial
    best: FrozenTrial
    front: list[FrozenTrial]
    ties: list[FrozenTrial]  # tied with the top, beside the one recommended
    reason: str


def front_top(study: optuna.Study, trials: list[FrozenTrial] | None = None) -> FrontTop | None:
    """The top of the feasible front of `trials` (by default every completed, deployable
    trial that did the forced work); None when none is feasible. What racing and the steps
    read while a study runs; `recommend` adds the what-ifs and the best effort."""
    if trials is None:
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        equal, _ = split_equal_work(measured_trials(complete, study.get_trials(deepcopy=False)))
        trials, _ = split_deployable(study, equal)
    feasible = [t for t in trials if is_feasible(t)]
    if not feasible:
        return None
    directions = _direction_names(study)
    names = objective_names(study)
    signs = [1.0 if d == "maximize" else -1.0 for d in directions]
    front = pareto_front(feasible, directions)
    top = max(front, key=lambda t: (signs[0] * t.values[0], -t.number))
    ties = [t for t in front if t is not top and tied(t, top)]
    best = top
    reason = f"best {names[0]} on the feasible Pareto front"
    if ties and len(signs) > 1:
        best = max([top, *ties], key=lambda t: (signs[1] * t.values[1], -t.number))
        if best is not top:
            reason = (
                f"tied on {names[0]} with trial {top.number} (the difference lies inside "
                f"its interval), better {names[1]}"
            )
    return FrontTop(top, best, front, [t for t in [top, *ties] if t is not best], reason)


def recommend(study: optuna.Study) -> Recommendation:
    """The best deployable trial: on the feasible Pareto front, best on the first objective
    (a tie inside the intervals goes to the next objective); without a feasible one, the
    deployable trial that violates the constraints least."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        raise StudyError(f"study '{study.study_name}' has no completed trial yet")
    target = deploy_target(study)
    # A repeated proposal carries its twin's figures: the twin alone stands for them (a
    # repeat that names no such twin stands for its own: autotune.records.repeats).
    measured = measured_trials(complete, study.get_trials(deepcopy=False))
    equal, unequal = split_equal_work(measured)
    candidates, what_ifs = split_deployable(study, equal)
    what_ifs = unequal + what_ifs
    if not candidates and unequal and not equal:
        raise NoDeployableTrial(
            f"no completed trial of study '{study.study_name}' did the work its load test "
            f"forced: {unequal[0][1].removeprefix(UNEQUAL_PREFIX)}; rank on "
            "throughput_requests_per_s, or measure an "
            "engine that takes the forced length",
            what_ifs,
        )
    if not candidates:
        raise NoDeployableTrial(
            f"no completed trial of study '{study.study_name}' reproduces on its deploy "
            f"target {target} yet ({len(what_ifs)} what-if(s): `autotune best` lists them); "
            "run more trials, or pick one with --trial N",
            what_ifs,
        )
    holdout = study_holdout(study)
    confirmed = [
        t for t in candidates if holdout is None or not is_feasible(t) or confirmed_trial(t)
    ]
    found = front_top(study, confirmed) or front_top(study, candidates)
    if found is not None:
        sure = holdout is not None and confirmed_trial(found.best)
        return Recommendation(
            trial=found.best,
            feasible=True,
            reason=found.reason,
            front=found.front,
            target=target,
            ties=found.ties,
            what_ifs=what_ifs,
            top=found.top,
            error_bound=stated_error(study) if sure else None,
            confirmation=confirmation_of(found.best),
            holdout=holdout,
            passed_over=[] if holdout is None else passed_over(study, candidates, found.best),
        )
    signs = [1.0 if d == "maximize" else -1.0 for d in _direction_names(study)]
    least = min(
        candidates,
        key=lambda t: (sum(max(v, 0.0) for v in constraint_values(t)), -signs[0] * t.values[0]),
    )
    return Recommendation(
        trial=least,
        feasible=False,
        reason="no deployable trial meets every constraint; this one violates them least "
        "(best effort)",
        front=[],
        target=target,
        what_ifs=what_ifs,
    )


def study_holdout(study: optuna.Study) -> dict[str, Any] | None:
    """The study's held-out slice ({"items", "digest"}); None where it confirms nothing."""
    from autotune.accuracy.confirm import HOLDOUT

    held = study.user_attrs.get(HOLDOUT)
    return held if isinstance(held, dict) and held.get("items") else None


def confirmation_of(trial: FrozenTrial) -> Confirmed | None:
    """The trial's confirmation verdict (autotune.accuracy.confirm.Confirmation), if any."""
    verdict = (TrialRecord.of(trial).model_extra or {}).get(CONFIRMATION)
    return Confirmed.of(verdict) if isinstance(verdict, dict) else None


def confirmed_trial(trial: FrozenTrial) -> bool:
    """Whether the trial may be recommended with the study's error bound: its answers were
    confirmed on the held-out items, or it is the reference (which loses nothing to itself)."""
    verdict = confirmation_of(trial)
    return TrialRecord.of(trial).is_reference or (
        verdict is not None and verdict.decision == "confirmed"
    )


def stated_error(study: optuna.Study) -> float | None:
    """1 - the floor's confidence: what the held-out confirmation bounds the recommendation's
    chance of losing max_drop or more by."""
    from autotune.space import Constraints

    space = StudyRecord.of(study).space
    floor = Constraints.model_validate(space.get("constraints") or {}).accuracy
    return 1 - floor.confidence


def passed_over(
    study: optuna.Study, candidates: list[FrozenTrial], chosen: FrozenTrial
) -> list[tuple[FrozenTrial, str]]:
    """The trials the floor passed that beat `chosen` on the first objective but were not
    confirmed, each with why, best first."""
    sign = 1.0 if _direction_names(study)[0] == "maximize" else -1.0
    faster = [
        t
        for t in candidates
        if is_feasible(t)
        and not confirmed_trial(t)
        and sign * t.values[0] > sign * chosen.values[0]
    ]
    return [(t, unconfirmed_reason(t)) for t in sorted(faster, key=lambda t: -sign * t.values[0])]


def unconfirmed_reason(trial: FrozenTrial) -> str:
    """Why a trial the floor passed is not recommended, in words."""
    verdict = confirmation_of(trial)
    record = TrialRecord.of(trial)
    why = record.accuracy_not_judged or record.confirmation_skipped
    if why is not None:
        return f"trial {trial.number}: {why.line()}"
    if verdict is None:
        return (
            f"trial {trial.number} answered none of the held-out items (its reference was not "
            "measured yet, or it reused answers never confirmed)"
        )
    return (
        f"trial {trial.number} failed its confirmation on {_known(verdict.n_items)} of the "
        f"{_known(verdict.holdout_items)} held-out items (error {verdict.error or 0:.3g})"
    )


def _known(count: int | None) -> int | str:
    return "?" if count is None else count


def chosen_trial(study: optuna.Study, number: int | None) -> FrozenTrial:
    """The trial `export` and `verify` act on: `number`, or the recommendation. None is
    recommended while a completed trial cannot be read: it may be the best one."""
    if number is not None:
        return find_trial(study, number)
    unread = completed_unreadable(study.get_trials(deepcopy=False))
    if unread:
        raise StudyError(
            f"{unreadable_line(study.study_name, unread[0])}; it may be the best trial, so "
            "nothing is recommended until it is repaired or deleted (or choose one with "
            "--trial N)"
        )
    return recommend(study).trial


def find_trial(study: optuna.Study, number: int) -> FrozenTrial:
    for trial in study.get_trials(deepcopy=False):
        if trial.number == number:
            if is_stand_in(trial):
                raise StudyError(
                    f"{unreadable_line(study.study_name, trial)}: repair or delete it, or "
                    "choose another with --trial N"
                )
            if trial.state != TrialState.COMPLETE:
                raise StudyError(f"trial {number} did not complete (state {trial.state.name})")
            return trial
    raise StudyError(f"study '{study.study_name}' has no trial {number}")


def reference_trial(study: optuna.Study, group: str | None = None) -> FrozenTrial | None:
    """The study's completed reference; with `group`, that comparison group's own. A study
    resumed on another machine (--allow-other-machine) measures its reference again there:
    its trials are compared with a reference of their machine, never with another's speed.
    A trial whose machine is unknown serves every group (autotune.study.results.groups)."""
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if TrialRecord.of(trial).is_reference and in_group_of(trial, group):
            return trial
    return None


def in_group_of(trial: FrozenTrial, group: str | None) -> bool:
    """Whether `trial` belongs to comparison group `group` (None: any), or serves every group
    (its machine unknown)."""
    if group is None:
        return True
    machine = trial_machine(trial.user_attrs)
    return machine is None or machine.group in (group, None)
