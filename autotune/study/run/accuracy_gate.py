"""Which of a trial's accuracy passes can change the recommendation, decided after its load test.

The study recommends the fastest confirmed trial, else the reference
(autotune.accuracy.confirm). A trial whose load test already misses the memory budget or the
latency SLO is infeasible whatever it answers, and one whose load is no measurement fails:
either answers nothing more, its record says why
(records.parts.NotJudged) and its accuracy constraint is 0, unknown (the sampler learns from
the other constraints). Every other trial answers the search floor. One the floor passes is
confirmed only where it is faster than the best confirmed trial so far
(autotune.study.results.best_confirmed): a slower one could never be recommended, so it
answers no held-out item and its record says why (records.parts.NotConfirmed). With dummy
weights the same rules time the pass (autotune.accuracy.timed): screening around the load
test, the rest after it (timed_answers).
"""

from __future__ import annotations

import optuna

from autotune.accuracy.reuse import accuracy_key
from autotune.accuracy.timed import TimedPass, TimedRest, timed_before
from autotune.engines import EngineSession
from autotune.engines.measurement import to_measurement
from autotune.engines.session import measure_plan
from autotune.errors import TrialFailure
from autotune.params import TrialConfig
from autotune.records import SessionResult
from autotune.records.parts import NotConfirmed, NotJudged
from autotune.space import SearchSpace
from autotune.study.plan import StudyPlan
from autotune.study.results.best_confirmed import best_confirmed
from autotune.study.run.verdicts import constraint_values

_OVER = {
    "memory": "its load test is over the memory budget",
    "latency": "its load test is over the latency SLO",
}
_NO_MEASUREMENT = "its load test is no measurement (the trial fails)"


def first_objective(
    plan: StudyPlan, config: TrialConfig, result: SessionResult, *, startup_s: float
) -> tuple[float | None, dict[str, float]]:
    """The load test's first objective (None where the load is no measurement) and the
    constraint values its figures already decide (memory, latency)."""
    try:
        m = to_measurement(
            plan.space,
            config,
            result,
            startup_s=startup_s,
            evalset=plan.evalset,
            measure_accuracy=False,
        )
    except TrialFailure:  # no measurement: the trial fails when it is judged
        return None, {}
    value = m.user_attrs().written().get(plan.space.objectives[0].metric)
    values = constraint_values(plan.space, m, None)
    return (float(value) if isinstance(value, int | float) else None), values


def not_judged(
    plan: StudyPlan,
    study: optuna.Study,
    config: TrialConfig,
    result: SessionResult,
    *,
    startup_s: float,
) -> NotJudged | None:
    """Why the trial's accuracy is not judged (over the memory budget or the latency SLO, or
    a load that is no measurement), or None where it is. A load with no measurement (no
    tokens, unsettled) fails the trial when it is judged, with that failure's reason: its
    answers could change nothing, so it answers nothing more either."""
    value, values = first_objective(plan, config, result, startup_s=startup_s)
    if value is None:
        return NotJudged(reason="no-measurement", words=_NO_MEASUREMENT)
    for limit, words in _OVER.items():
        if values.get(limit, 0.0) > 0:
            return NotJudged(reason=limit, words=words)
    return None


def not_confirmed(
    plan: StudyPlan,
    study: optuna.Study,
    config: TrialConfig,
    result: SessionResult,
    *,
    startup_s: float,
) -> NotConfirmed | None:
    """Why a trial the floor passed is not confirmed (no faster than the best confirmed
    trial now), or None where its confirmation may change the recommendation."""
    value, _ = first_objective(plan, config, result, startup_s=startup_s)
    best = best_confirmed(study, plan.group)
    if value is None or best is None or best.beaten_by(value):
        return None
    return best.not_confirmed()


def timed_pass(
    plan: StudyPlan,
    study: optuna.Study,
    config: TrialConfig,
    is_reference: bool,
    *,
    known: bool,
) -> TimedPass | None:
    """With dummy weights, the pass the trial answers for its time alone
    (autotune.accuracy.timed); None where a real study would reuse answers: a trial of this
    study timed the same output key, or the answers cache holds it (`known`: it gave answers)."""
    if plan.timed_accuracy is None or known:
        return None
    if timed_before(study, accuracy_key(config, plan.evalset)):
        return None
    return plan.timed_pass(config, reference=is_reference)


def timed_answers(
    space: SearchSpace, session: EngineSession, config: TrialConfig, ids: list[str], rest: TimedRest
) -> dict[str, int]:
    """`ids` answered for their time alone, each forced to its length: their tokens."""
    if not ids:
        return {}
    lengths = {i: rest.lengths[i] for i in ids}
    timed = TimedPass(order=ids, stages=[len(ids)], lengths=lengths)
    plan = measure_plan(space, config, accuracy_ids=None, timed=timed)
    plan = plan.model_copy(update={"load_test": False, "workload_requests": 0})
    return dict(session.measure(config, plan, on_phase=None).timed_tokens)
