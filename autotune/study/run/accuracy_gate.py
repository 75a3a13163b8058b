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
test, the rest after it (timed_answers), the reference's stages extended as far as the
candidate's items reach (TimedAnswers).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import optuna

from autotune.accuracy.answers_cache import AnswersKey
from autotune.accuracy.reuse import accuracy_key, answered_prefix
from autotune.accuracy.timed import TimedPass, TimedRest, timed_before, timed_text
from autotune.engines import EngineSession
from autotune.engines.measurement import to_measurement
from autotune.errors import TrialFailure
from autotune.measure.convergence import RACED
from autotune.params import TrialConfig
from autotune.records import SessionResult
from autotune.records.parts import NotConfirmed, NotJudged
from autotune.space import SearchSpace
from autotune.study.plan import StudyPlan
from autotune.study.results.best_confirmed import best_confirmed
from autotune.study.run.reference_load import (
    ReferenceStages,
    extend_next_stage,
    extend_or_note,
    timed_only,
)
from autotune.study.run.verdicts import constraint_values

_OVER = {
    "memory": "its load test is over the memory budget",
    "latency": "its load test is over the latency SLO",
}
_NO_MEASUREMENT = "its load test is no measurement (the trial fails)"
# What a timed trial does where the reference could not answer more (reference_load).
_TIMED_WITHOUT = "is timed without them"


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
    plan = timed_only(space, config, ids, rest.lengths)
    return dict(session.measure(config, plan, on_phase=None).timed_tokens)


@dataclass(frozen=True)
class TimedSettled:
    """A timed trial's session result with its pass's tokens, and how many it timed itself."""

    result: SessionResult
    computed: int
    not_judged: NotJudged | None = None
    not_confirmed: NotConfirmed | None = None


class TimedAnswers:
    """A dummy-weights trial's answers: timed, never judged (autotune.accuracy.timed)."""

    def __init__(self, plan: StudyPlan, stages: ReferenceStages) -> None:
        self.plan = plan
        self.stages = stages

    def settle(
        self,
        study: optuna.Study,
        number: int,
        result: SessionResult,
        session: EngineSession,
        config: TrialConfig,
        *,
        rest: TimedRest | None,
        key: AnswersKey | None,
        known: Mapping[str, str],
        source: int | str | None,
        for_reference: bool,
    ) -> TimedSettled:
        """A timed pass's answers are noise: the cache keeps how long each one was, so a later
        study on the same checkpoint and set reuses the pass (its time), never a text. A
        candidate's rest (`rest`) is answered as a real study's would be: nothing over a limit,
        else its floor's items, and the held-out ones where it is faster than the best trial
        that timed its confirmation; the reference first answers those of them it has not
        (ReferenceStages.extend), and the candidate's time counts its extensions, as a real
        candidate's does. `known`, `source`: what the cache gave the trial, and its entry."""
        skipped, unconfirmed = None, None
        if rest is not None and result.stop_reason != RACED and not result.screened_out:
            started, tokens = time.perf_counter(), dict(result.timed_tokens)
            at = {"startup_s": session.startup_s}
            skipped = not_judged(self.plan, study, config, result, **at)
            if skipped is None:
                self._reference_through(study, number, [*tokens, *rest.floor])
                tokens |= timed_answers(self.plan.space, session, config, rest.floor, rest)
                if rest.confirm:
                    unconfirmed = not_confirmed(self.plan, study, config, result, **at)
                if rest.confirm and unconfirmed is None:
                    self._reference_with(study, number, rest.confirm)
                    tokens |= timed_answers(self.plan.space, session, config, rest.confirm, rest)
            spent = time.perf_counter() - started
            update = {"timed_tokens": tokens, "accuracy_s": result.accuracy_s + spent}
            result = result.model_copy(update=update)
        lengths = {i: timed_text(n) for i, n in result.timed_tokens.items()}
        if key is not None and lengths and skipped is None:
            self.stages.cache.write(key, lengths)
        if for_reference and (known or lengths):
            reused = f"; {len(known)} from the answers cache" if isinstance(source, str) else ""
            answered = answered_prefix(self.stages.order, {**known, **lengths})
            self.stages.progress.note(self.stages.line(answered, extra=reused))
        if source is None:
            computed = len(result.timed_tokens)
            return TimedSettled(result, computed, skipped, unconfirmed)
        self.stages.note_once("timed accuracy passes reused from the answers cache")
        return TimedSettled(result, 0)

    def _reference_through(self, study: optuna.Study, number: int, ids: list[str]) -> None:
        """The reference's next stages, in turn, until it has answered the search order's
        prefix that `ids` (a candidate's floor items) cover, as a real candidate's floor asks
        for them (autotune.study.run.twins.TrialAnswers._follow). Nothing before the
        reference has completed: a real study would wait for it; a timed one goes on."""
        order = self.stages.order
        upto = answered_prefix(order, dict.fromkeys(ids))
        while (reference := self.stages.answers(study)) is not None:
            answered = answered_prefix(order, reference.predictions)
            if answered >= upto:
                return
            if not extend_next_stage(
                self.stages, study, answered, for_trial=number, without=_TIMED_WITHOUT
            ):
                return

    def _reference_with(self, study: optuna.Study, number: int, ids: list[str]) -> None:
        """The reference answers those of `ids` it has not (a candidate's held-out items),
        once it has completed."""
        if self.stages.answers(study) is not None:
            extend_or_note(self.stages, study, ids, for_trial=number, without=_TIMED_WITHOUT)
