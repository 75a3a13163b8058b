"""Configurations and answers measured before: a repeated proposal copies its twin's
figures, a trial whose output key was answered before reuses those answers (in this study or
the answers cache), and a trial whose reference another worker still runs waits for it."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, NoReturn

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.accuracy.answers_cache import AnswersKey
from autotune.accuracy.confirm import ConfirmRequest
from autotune.accuracy.reuse import (
    accuracy_key,
    answered_prefix,
    find_reusable,
    floor_request,
    stored_accuracy,
)
from autotune.accuracy.scoring import score_predictions
from autotune.accuracy.staged import FloorRequest
from autotune.accuracy.timed import TimedPass, TimedRest
from autotune.engines import EngineSession
from autotune.engines.session import accuracy_batch_size
from autotune.errors import TrialFailure
from autotune.evalset.dataset import EvalSet
from autotune.measure.convergence import RACED
from autotune.params import TrialConfig
from autotune.records import SessionResult
from autotune.records.parts import NotConfirmed, NotJudged, Paired
from autotune.records.stored import TrialRecord
from autotune.records.writer import end_trial
from autotune.space import SearchSpace
from autotune.study.plan import StudyPlan
from autotune.study.results.groups import group_of
from autotune.study.results.select import in_group_of, reference_trial
from autotune.study.run.accuracy_gate import (
    TimedAnswers,
    not_confirmed,
    not_judged,
    timed_pass,
)
from autotune.study.run.reference_load import (
    ReferenceAnswers,
    ReferenceStages,
    answers_only,
    cache_key,
    extend_next_stage,
)
from autotune.study.run.verdicts import (
    CONFIRMATION,
    confirmation_request,
    identical_answers,
    judge,
    record_constraints,
)

# Attributes that describe a trial's own run, not its configuration's figures.
_NOT_INHERITED = frozenset(
    {
        "is_reference",
        "candidate",
        "sample_outputs_artifact",
        "accuracy_reused_from",
        "answers_computed",
        "time_s",
        "launch_id",
        "launch_started",
        "gpus",
        "gpu_share",
        "machine",  # the machine of the run that proposed it again (its comparison group)
        # A repeat of a recovered trial was proposed again, not recovered: it would otherwise
        # count as a second recovery of the same results.
        "recovered_from_trial",
        # How it was proposed (a step, or the sampler): a repeat's own, not its twin's.
        "step",
    }
)


# How often a trial looks whether the same configuration or the reference, running in another
# worker, is done: one study read a second is nothing next to a trial.
TWIN_POLL_S = 1.0
_TWIN_STATES = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)


def identical_trial(
    study: optuna.Study, config: TrialConfig, *, number: int, timeout_s: float = 0.0
) -> FrozenTrial | None:
    """A completed trial of the same configuration, or one stopped by racing (the top it lost
    to is still in the study, and a repeat would only draw another partial figure). One that
    another worker is running is waited for (up to `timeout_s`): measuring it twice at once
    would cost a GPU the trial's time for figures the study already gets. Only a twin of
    the trial's comparison group counts (autotune.study.results.groups)."""
    wanted = config.model_dump()
    deadline = time.monotonic() + timeout_s
    # Only a twin measured on this trial's machine: another's figures are not this one's.
    group = next(
        (group_of(t) for t in study.get_trials(deepcopy=False) if t.number == number), None
    )
    while True:
        running = False
        for other in study.get_trials(deepcopy=False, states=_TWIN_STATES):
            record = TrialRecord.of(other)
            if other.number == number or record.config != wanted:
                continue
            if group_of(other) not in (group, None):
                continue
            if other.state == TrialState.COMPLETE and record.constraints is not None:
                return other
            if other.state == TrialState.PRUNED and record.raced_by is not None:
                return other
            running = running or other.state == TrialState.RUNNING
        if not running or time.monotonic() > deadline:
            return None
        time.sleep(TWIN_POLL_S)


def await_reference(
    study: optuna.Study, space: SearchSpace, group: str | None = None
) -> FrozenTrial | None:
    """The completed reference of comparison group `group` (None: the study's); waits while
    another process (a shared study) still runs it.

    Without it a relative floor cannot be judged, and a candidate must never pass unjudged. A
    reference that is only queued is not waited for: this process would run it after this
    trial (the run queues it first, autotune.study.proposals.queueing, so that takes two runs
    queueing at once); a named candidate failed so is queued again by the next run.
    """
    accuracy = space.constraints.accuracy
    needs_reference = accuracy.enabled and accuracy.mode == "relative"
    deadline = time.monotonic() + space.trial_timeout_s
    while True:
        # Running first, completed second: a reference that completes between the two reads
        # is then found by the second. The other order took it for missing (CI, Postgres).
        pending = [
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if TrialRecord.of(t).is_reference and in_group_of(t, group)
        ]
        reference = reference_trial(study, group)
        if reference is not None or not needs_reference:
            return reference
        if not pending or time.monotonic() > deadline:
            raise TrialFailure(
                "no completed reference trial to compare with (it failed or is missing); "
                "run the study again to retry the reference",
                kind="no-reference",
            )
        time.sleep(TWIN_POLL_S)


def _inherited(twin: FrozenTrial) -> TrialRecord:
    """The twin's figures for the repeat, and where they came from; nothing was computed."""
    attrs = {key: value for key, value in twin.user_attrs.items() if key not in _NOT_INHERITED}
    copied = TrialRecord.part(duplicate_of=twin.number, answers_computed=0)
    return TrialRecord.part(**attrs).joined(copied)


def copy_twin(
    trial: optuna.Trial, twin: FrozenTrial, space: SearchSpace, evalset: EvalSet
) -> list[float]:
    """The sampler proposed a configuration already measured: record it, don't re-run it.

    GPU time goes to configurations not yet seen; `duplicate_of` says where the figures
    came from, and the trial does not count towards --trials.
    """
    attrs = _inherited(twin)
    twin_record = TrialRecord.of(twin)
    constraints = dict(twin_record.constraints or {})
    if twin_record.is_reference and twin_record.item_passed:
        # The reference's twin is still a candidate: judged like every other one (a zero
        # difference), not left without a comparison.
        own = stored_accuracy(twin)
        paired = judge(own, own, space, evalset)
        attrs = attrs.joined(TrialRecord.part(paired_vs_reference=Paired.of(paired.to_dict())))
    end_trial(trial, attrs)
    record_constraints(trial, constraints)
    return list(twin.values)


def copy_raced_twin(trial: optuna.Trial, twin: FrozenTrial) -> NoReturn:
    """The sampler proposed a configuration that lost its race: PRUNED again, with the twin's
    partial figures and reason, not re-run (and not counted, as any repeat)."""
    end_trial(trial, _inherited(twin))
    raise optuna.TrialPruned(str(TrialRecord.of(twin).raced_reason))


@dataclass(frozen=True)
class AnswersPlan:
    """Where a trial's answers come from, and what its engine's accuracy pass is asked."""

    known: dict[str, str]  # answers it has before measuring (an earlier trial's, the cache's)
    source: int | str | None  # where they came from: a trial's number, or "cache:<entry>"
    accuracy_ids: list[str] | None  # what the engine's accuracy pass answers; None: none
    floor: FloorRequest | None  # how that pass answers and stops
    follow: bool  # whether its floor is followed past the engine's pass (TrialAnswers.settle)
    key: AnswersKey | None  # its answers cache entry; None: not cached
    for_reference: bool = False  # the reference's own trial (its first stage)
    timed: TimedPass | None = None  # dummy weights: the pass answered for its time alone
    timed_rest: TimedRest | None = None  # a candidate's, after its load test

    @property
    def spends_accuracy(self) -> bool:
        """Whether the trial answers anything itself after its load test."""
        return self.accuracy_ids is not None or self.follow or self.timed is not None


@dataclass(frozen=True)
class Settled:
    """A trial's session result with all its answers, and how many it computed itself."""

    result: SessionResult
    computed: int
    reference: ReferenceAnswers | None  # the reference's answers it is judged against
    confirm: ConfirmRequest | None = None  # the confirmation it ran, if its floor passed it
    # The verdict of the earlier trial whose answers it reuses: the same answers, the same one.
    reused_confirmation: dict[str, Any] | None = None
    # Why its accuracy was not judged (autotune.study.run.accuracy_gate); None: judged.
    not_judged: NotJudged | None = None
    # Why the floor passed it but it answered no held-out item; None: confirmed, or not due.
    not_confirmed: NotConfirmed | None = None


class TrialAnswers:
    """A trial's answers: reused where they are known (a completed trial of the same output
    key, or the answers cache), computed where not, and its floor followed past the items
    the reference had answered when it started (ReferenceStages.extend)."""

    def __init__(self, plan: StudyPlan, stages: ReferenceStages) -> None:
        self.plan = plan
        self.stages = stages
        self.order = stages.order

    def _scores(self, predictions: dict[str, str]) -> dict[str, float]:
        return score_predictions(self.plan.evalset, predictions).item_scores

    def floor(self, config: TrialConfig, reference: ReferenceAnswers | None) -> FloorRequest | None:
        """How the trial's accuracy pass answers and stops (the sequential floor)."""
        scores = reference.report.item_scores if reference is not None else None
        batch = accuracy_batch_size(self.plan.space, config)
        return floor_request(self.plan.space, self.plan.evalset, scores, batch=batch)

    def plan_for(
        self, study: optuna.Study, config: TrialConfig, output_key: str, *, is_reference: bool
    ) -> AnswersPlan:
        key = cache_key(self.plan, config)
        if self.plan.dummy_weights:  # noise, timed only: a cached timed pass is not redone
            known, source = self._known(study, output_key, key, in_study=False)
            planned = AnswersPlan(known, source, None, None, False, key, is_reference)
            timed = timed_pass(self.plan, study, config, is_reference, known=bool(planned.known))
            accuracy = self.plan.timed_accuracy
            if timed is None or is_reference or accuracy is None:
                return dataclasses.replace(planned, timed=timed)
            # Screening around the load test; the rest after it, where it is judged.
            engine, rest = accuracy.deferred(timed)
            return dataclasses.replace(planned, timed=engine, timed_rest=rest)
        known, source = self._known(study, output_key, key)
        reference = None if is_reference else self.stages.answers(study)
        floor = self.floor(config, reference)
        if floor is None and not is_reference and self.stages.staged:
            # Another worker still runs the reference: its floor is followed once it is done.
            return AnswersPlan(known, source, None, None, follow=True, key=key)
        if floor is None:  # every item, or the reference's first stage
            wanted = self.order[: self.stages.stages[0]] if is_reference else self.order
            todo = [item_id for item_id in wanted if item_id not in known] or None
            return AnswersPlan(known, source, todo, None, False, key, for_reference=is_reference)
        if known:  # followed from what is known, without an accuracy pass of its own
            decided = floor.judge(self._scores(known)).decision != "undecided"
            done = decided or answered_prefix(self.order, known) >= len(self.order)
            return AnswersPlan(known, source, None, None, not done, key, is_reference)
        # The engine screens (the floor's first stage, before its load test) and no more:
        # the rest follows the load test, where it can change the recommendation
        # (autotune.study.run.accuracy_gate).
        return AnswersPlan({}, None, None, floor, True, key, is_reference)

    def _known(
        self, study: optuna.Study, output_key: str, key: AnswersKey | None, in_study: bool = True
    ) -> tuple[dict[str, str], int | str | None]:
        """Answers of this output key already paid for: a completed trial's in this study,
        else the answers cache's."""
        earlier = find_reusable(study, output_key) if in_study else None
        if earlier is not None:
            record = TrialRecord.of(earlier)
            reference = self.stages.answers(study) if record.is_reference else None
            known = reference.predictions if reference is not None else dict(record.predictions)
            return known, earlier.number
        if key is None:
            return {}, None
        cached = self.stages.cache.read(key, self.plan.evalset)
        if cached.refused is not None:
            self.stages.note_once(f"answers cache: refused {cached.refused}; answered again")
        return cached.answers, f"cache:{key.id}" if cached.answers else None

    def settle(
        self,
        study: optuna.Study,
        number: int,
        session: EngineSession,
        config: TrialConfig,
        planned: AnswersPlan,
        result: SessionResult,
    ) -> Settled:
        """`result` with the known answers, those its floor still needed and its
        confirmation's, stored in the answers cache."""
        if self.plan.dummy_weights:
            timed = TimedAnswers(self.plan, self.stages)
            return timed_settled(timed, study, number, result, session, config, planned)
        confirm, verdict = confirmation_for(self.plan, study, config, planned)
        computed = dict(result.predictions)
        predictions = {**planned.known, **computed}
        spent = 0.0
        measured = result.stop_reason != RACED and not result.screened_out
        at = {"startup_s": session.startup_s}
        over = not_judged(self.plan, study, config, result, **at) if measured else None
        # Over the memory budget or the latency SLO it answers nothing more (autotune.study.
        # run.accuracy_gate); every other trial answers the search floor.
        skipped = over if planned.follow else None
        if planned.follow and measured and over is None:
            started = time.perf_counter()
            more = self._follow(study, number, session, config, predictions)
            spent = time.perf_counter() - started
            computed |= more
            predictions |= more
        confirm = confirm if measured and over is None else None
        passes = confirm is not None and self._floor_passes(study, config, predictions)
        # Confirmed only where faster than the best confirmed trial now (read late: another
        # worker may have confirmed one meanwhile); a slower one could never be recommended.
        unconfirmed = not_confirmed(self.plan, study, config, result, **at) if passes else None
        if confirm is not None and passes and unconfirmed is None:
            started = time.perf_counter()
            more = self._confirm(study, number, session, config, predictions, confirm)
            spent += time.perf_counter() - started
            computed |= more
            predictions |= more
        if planned.key is not None and computed:
            self.stages.cache.write(planned.key, predictions)
        if planned.for_reference and predictions:
            source = planned.source if isinstance(planned.source, str) else None
            reused = f"; {len(planned.known)} from the answers cache" if source else ""
            self.stages.progress.note(
                self.stages.line(answered_prefix(self.order, predictions), extra=reused)
            )
        update = {"predictions": predictions, "accuracy_s": result.accuracy_s + spent}
        reference = None if planned.for_reference else self.stages.answers(study)
        settled = result.model_copy(update=update)
        confirm = None if unconfirmed is not None else confirm
        return Settled(settled, len(computed), reference, confirm, verdict, skipped, unconfirmed)

    def _floor_passes(self, study: optuna.Study, config: TrialConfig, predictions: Any) -> bool:
        """Whether the floor passes `predictions`: its sequence, or identical answers."""
        reference = self.stages.answers(study)
        floor = self.floor(config, reference)
        if floor is None or reference is None:  # a relative floor, as any confirmation's
            return False
        passed = floor.judge(self._scores(predictions)).decision == "feasible"
        return passed or identical_answers(predictions, reference.predictions, self.order)

    def _confirm(
        self,
        study: optuna.Study,
        number: int,
        session: EngineSession,
        config: TrialConfig,
        predictions: dict[str, str],
        request: ConfirmRequest,
    ) -> dict[str, str]:
        """The held-out answers of a trial its floor passed, a stage at a time until the
        confirmation decides (autotune.accuracy.confirm); the reference answers each stage's
        items first, so it never answers more of the slice than a decision needs."""
        scores = self._scores(predictions)
        more: dict[str, str] = {}
        for size in request.stages:
            ids = request.order[:size]
            reference = self.stages.answers_for(study, ids, for_trial=number).item_scores
            todo = [i for i in ids if i not in predictions and i not in more]
            if todo:
                new = session.measure(config, answers_only(self.plan.space, config, todo))
                more |= new.predictions
                scores |= self._scores(new.predictions)
            if request.floor(reference).judge(scores).decision != "undecided":
                break
        return more

    def _follow(
        self,
        study: optuna.Study,
        number: int,
        session: EngineSession,
        config: TrialConfig,
        predictions: dict[str, str],
    ) -> dict[str, str]:
        """Answers past the engine's pass until the floor decides or the set runs out: up to
        the reference's answered items, then the reference's next stage and those items."""
        space, pool = self.plan.space, len(self.order)
        scores, predictions, more = self._scores(predictions), dict(predictions), {}
        while True:
            floor = self.floor(config, self.stages.answers(study))
            if floor is None or floor.judge(scores).decision != "undecided":
                return more
            have, answered = answered_prefix(self.order, predictions), len(floor.order)
            if have < answered:  # to its next look, inside what the reference answered
                upto = next((size for size in floor.stages if size > have), answered)
                ids = [i for i in self.order[have:upto] if i not in predictions]
                new = session.measure(config, answers_only(space, config, ids)).predictions
                more |= new
                predictions |= new
                scores |= self._scores(new)
                continue
            if answered >= pool:
                return more  # the set ran out: undecided, and so infeasible
            without = f"is judged on the {answered} it has answered"
            if not extend_next_stage(
                self.stages, study, answered, for_trial=number, without=without
            ):
                return more


def confirmation_for(
    plan: StudyPlan, study: optuna.Study, config: TrialConfig, planned: AnswersPlan
) -> tuple[ConfirmRequest | None, dict[str, Any] | None]:
    """The confirmation the trial runs if its floor passes it (autotune.accuracy.confirm);
    none without a floor, and the earlier trial's verdict where it reuses its answers."""
    if isinstance(planned.source, int):
        earlier = study.trials[planned.source].user_attrs
        if CONFIRMATION in earlier:
            return None, {CONFIRMATION: earlier[CONFIRMATION]}
    # Answers reused but never confirmed (slower then) are confirmed now, where this trial is
    # faster than the best confirmed; none without a held-out slice (confirm_request).
    if planned.for_reference:
        return None, None
    batch = accuracy_batch_size(plan.space, config)
    key = accuracy_key(config, plan.evalset)
    slot = {"worker": plan.worker, "workers": plan.workers, "batch": batch}
    return confirmation_request(study, plan.space, plan.evalset, key=key, **slot), None


def timed_settled(
    timed: TimedAnswers,
    study: optuna.Study,
    number: int,
    result: SessionResult,
    session: EngineSession,
    config: TrialConfig,
    planned: AnswersPlan,
) -> Settled:
    """A dummy-weights trial's answers, timed as `planned` says (accuracy_gate.TimedAnswers)."""
    settled = timed.settle(
        study,
        number,
        result,
        session,
        config,
        rest=planned.timed_rest,
        key=planned.key,
        known=planned.known,
        source=planned.source,
        for_reference=planned.for_reference,
    )
    at = {"not_judged": settled.not_judged, "not_confirmed": settled.not_confirmed}
    return Settled(settled.result, settled.computed, None, **at)


def accuracy_args(plan: StudyPlan, answers: AnswersPlan) -> dict[str, Any]:
    """What the engine's accuracy pass is asked: the floor's items, or a timed pass's."""
    timed = answers.timed
    ids = plan.evalset.decision_order() if timed is not None else answers.accuracy_ids
    return {"accuracy_ids": ids, "floor": answers.floor, "timed": timed}
