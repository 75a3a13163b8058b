"""One Optuna trial: propose, measure on the right launch, judge, record.

Each trial runs its request-time settings on the launch the scheduler provides
(autotune.study.launches), records its figures as user attributes, its constraint values, how
its time was spent and whether its export reproduces on the deploy target. A failed trial is a
FAIL with its reason, and the study goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NoReturn

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.accuracy.floor import infeasible_because
from autotune.accuracy.paired import PairedComparison, compare
from autotune.accuracy.reuse import (
    accuracy_key,
    find_reusable,
    screening_request,
    stored_accuracy,
)
from autotune.accuracy.scoring import AccuracyReport
from autotune.engines import measure_plan
from autotune.engines.measurement import Measurement, to_measurement
from autotune.errors import TrialFailure
from autotune.export.reproduce import reproduction
from autotune.measure.convergence import RACED
from autotune.params import TrialConfig
from autotune.records import SessionResult
from autotune.records.stored import TrialRecord
from autotune.space import SearchSpace
from autotune.space.sampling import suggest
from autotune.study.artifacts import ArtifactRecorder
from autotune.study.budget import Budget
from autotune.study.counting import FAILURE_WORDS, is_surplus
from autotune.study.interrupts import InterruptGate
from autotune.study.launches import LaunchScheduler
from autotune.study.plan import StudyPlan
from autotune.study.progress import SURPLUS, Progress
from autotune.study.racing import Incumbent, incumbent, record_raced, report_running_rate, spread_of
from autotune.study.recovery import Spool, owner, spool_payload
from autotune.study.select import CONSTRAINT_NAMES, DEPLOYABLE, reference_trial

# A load test is never cut below this many seconds by the budget: it still measures its
# minimum number of requests, this only stops it asking for more.
MIN_MEASURE_S = 5.0
# The memory constraint of a trial that ran out of memory: far beyond any measured one.
OOM_VIOLATION = 1e9
# Attributes set before the measurement, kept with it in the spool.
_RECORDED_EARLY = ("config", "output_key", "owner", "launch_id", "launch_started", "is_reference",
                   "candidate", "gpus", "gpu_share")  # fmt: skip


def constraint_values(
    space: SearchSpace,
    m: Measurement,
    paired: PairedComparison | None,
    *,
    same_answers: bool = False,
) -> dict[str, float]:
    """Constraint values (<= 0 is feasible) in CONSTRAINT_NAMES order.

    `same_answers`: every answer is the reference's, word for word; such a trial loses no
    accuracy whatever a small set's interval would allow, so it is never infeasible on it.
    """
    c = space.constraints
    values = dict.fromkeys(CONSTRAINT_NAMES, 0.0)
    if c.accuracy.enabled and m.accuracy is not None:
        if c.accuracy.mode == "absolute":
            values["accuracy"] = c.accuracy.min - m.accuracy.accuracy
        elif same_answers:
            values["accuracy"] = -c.accuracy.max_drop
        elif paired is not None:
            diff = paired.ci_low if c.accuracy.test == "bootstrap" else paired.accuracy_diff
            values["accuracy"] = -c.accuracy.max_drop - diff
    if c.memory_budget_mib is not None and "peak_memory_mib" in m.figures:
        values["memory"] = m.figures["peak_memory_mib"] - c.memory_budget_mib
    if c.latency_slo_ms is not None and "e2e_latency_p95_ms" in m.figures:
        values["latency"] = m.figures["e2e_latency_p95_ms"] - c.latency_slo_ms
    return values


def record_constraints(trial: optuna.Trial, values: dict[str, float]) -> None:
    """Constraint values for the sampler (Optuna's set_constraint) and for our own readers.

    "deployable" (0 or 1) is given to the sampler too, so TPE learns where configurations
    that reproduce on the deploy target lie; feasibility reads the other three only.
    """
    trial.set_user_attr("constraints", values)
    for name, value in values.items():
        trial.set_constraint(name, value)


def judge(accuracy: AccuracyReport, reference: FrozenTrial, space: SearchSpace) -> PairedComparison:
    """Compare a candidate's answers with the reference's, item by item."""
    ref_accuracy = stored_accuracy(reference)
    return compare(
        accuracy.item_scores,
        ref_accuracy.item_scores,
        candidate_passed=accuracy.item_passed,
        reference_passed=ref_accuracy.item_passed,
        confidence=space.constraints.accuracy.confidence,
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
        # A repeat of a recovered trial was proposed again, not recovered: it would otherwise
        # count as a second recovery of the same results.
        "recovered_from_trial",
    }
)


# How often a trial looks whether the same configuration or the reference, running in another
# worker, is done: one study read a second is nothing next to a trial.
TWIN_POLL_S = 1.0


def identical_trial(
    study: optuna.Study, config: TrialConfig, *, number: int, timeout_s: float = 0.0
) -> FrozenTrial | None:
    """A completed trial of the same configuration. One that another worker is running is
    waited for (up to `timeout_s`): measuring it twice at once would cost a GPU the trial's
    time for figures the study already gets."""
    wanted = config.model_dump()
    deadline = time.monotonic() + timeout_s
    while True:
        running = False
        for other in study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)
        ):
            record = TrialRecord.of(other)
            if other.number == number or record.config != wanted:
                continue
            if other.state == TrialState.COMPLETE and record.constraints is not None:
                return other
            running = running or other.state == TrialState.RUNNING
        if not running or time.monotonic() > deadline:
            return None
        time.sleep(TWIN_POLL_S)


def await_reference(study: optuna.Study, space: SearchSpace) -> FrozenTrial | None:
    """The completed reference; waits while another process (a shared study) still runs it.

    Without it a relative floor cannot be judged, and a candidate must never pass unjudged.
    """
    accuracy = space.constraints.accuracy
    needs_reference = accuracy.enabled and accuracy.mode == "relative"
    deadline = time.monotonic() + space.trial_timeout_s
    while True:
        reference = reference_trial(study)
        if reference is not None or not needs_reference:
            return reference
        pending = [
            t
            for t in study.get_trials(
                deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)
            )
            if TrialRecord.of(t).is_reference
        ]
        if not pending or time.monotonic() > deadline:
            raise TrialFailure(
                "no completed reference trial to compare with (it failed or is missing); "
                "run the study again to retry the reference",
                kind="no-reference",
            )
        time.sleep(TWIN_POLL_S)


def fail_trial(
    trial: optuna.Trial, failure: TrialFailure, artifacts: ArtifactRecorder, *, started: bool = True
) -> NoReturn:
    """Record why the trial failed, and raise: FAIL, or PRUNED for out of memory or a launch
    that did not start (`started` False).

    TPE learns nothing from a failed trial: it proposed a launch that cannot start until five
    failures in a row ended the study (bench/cpu/replay.py). Such a trial is PRUNED instead,
    which TPE ranks below every completed one, with a constraint violated (memory, or
    deployable); `failure_kind` keeps it a failure wherever autotune reports it.
    """
    trial.set_user_attr("failure_kind", failure.kind)
    trial.set_user_attr("failure_reason", failure.reason)
    trial.set_user_attr("log_tail", failure.log_tail[-4000:])
    artifacts.log_tail(trial, failure.log_tail)
    if failure.kind != "oom" and started:
        raise failure
    constraints = {**dict.fromkeys(CONSTRAINT_NAMES, 0.0), DEPLOYABLE: 0.0}
    violated = "memory" if failure.kind == "oom" else DEPLOYABLE
    record_constraints(trial, {**constraints, violated: OOM_VIOLATION})
    raise optuna.TrialPruned(f"{FAILURE_WORDS.get(failure.kind, failure.kind)}: {failure.reason}")


@dataclass(frozen=True)
class _Proposal:
    config: TrialConfig
    output_key: str
    is_reference: bool
    twin_possible: bool  # a sampled configuration may repeat one already measured


@dataclass(frozen=True)
class _Run:
    config: TrialConfig
    result: SessionResult  # turned into the trial's figures by to_measurement
    startup_s: float
    launch_id: str
    measure_accuracy: bool
    reference: FrozenTrial | None  # None when this is the reference, or it failed
    cached: FrozenTrial | None  # the earlier trial whose answers this one reuses
    rival: Incumbent | None = None  # the trial it raced (autotune.study.racing)


@dataclass(frozen=True)
class _Verdict:
    measurement: Measurement
    attrs: dict[str, Any]  # what the trial records, beside its constraints
    constraints: dict[str, float]
    values: list[float]  # the objectives, in the space's order


def judge_run(plan: StudyPlan, run: _Run, time_s: dict[str, float]) -> _Verdict:
    """The figures, the paired comparison with the reference, the constraint values and
    whether the export reproduces the trial: everything the trial records from here on."""
    space = plan.space
    m = to_measurement(
        space,
        run.config,
        run.result,
        startup_s=run.startup_s,
        evalset=plan.evalset,
        measure_accuracy=run.measure_accuracy,
    )
    m.environment = {**m.environment, "launch_id": run.launch_id}
    time_s.update(m.time_s)
    attrs: dict[str, Any] = {}
    if run.cached is not None:
        m.accuracy = stored_accuracy(run.cached)
        m.predictions = dict(TrialRecord.of(run.cached).predictions)
        attrs["accuracy_reused_from"] = run.cached.number
    attrs["answers_computed"] = 0 if run.cached else len(m.predictions)
    attrs |= {k: v for k, v in m.user_attrs().items() if k != "time_s"}
    paired = None
    same_answers = False
    if run.reference is not None and m.accuracy is not None:
        paired = judge(m.accuracy, run.reference, space)
        attrs["paired_vs_reference"] = paired.to_dict()
        same_answers = m.predictions == TrialRecord.of(run.reference).predictions
    constraints = constraint_values(space, m, paired, same_answers=same_answers)
    check = reproduction(
        TrialRecord(config=attrs["config"], environment=attrs.get("environment") or {}),
        None if plan.endpoint else space.deploy,
    )
    # A trial that did not do the forced work is no more a recommendation than one that does
    # not reproduce: the sampler learns to leave both (autotune.measure.equal_work).
    constraints[DEPLOYABLE] = 0.0 if check.deployable and m.unequal_work is None else 1.0
    attrs |= {
        "deployable": check.deployable,
        "deployability": check.reason,
        "constraints": constraints,
        "infeasible_because": infeasible_because(
            {**attrs, "constraints": constraints}, space.constraints
        ),
    }
    # A screened-out trial ran no load test: it has no objective values, only its pruning.
    figures = m.user_attrs()
    values = [] if m.screened_out else [float(figures[o.metric]) for o in space.objectives]
    return _Verdict(m, attrs, constraints, values)


def copy_twin(trial: optuna.Trial, twin: FrozenTrial, space: SearchSpace) -> list[float]:
    """The sampler proposed a configuration already measured: record it, don't re-run it.

    GPU time goes to configurations not yet seen; `duplicate_of` says where the figures
    came from, and the trial does not count towards --trials.
    """
    for key, value in twin.user_attrs.items():
        if key not in _NOT_INHERITED:
            trial.set_user_attr(key, value)
    trial.set_user_attr("duplicate_of", twin.number)
    trial.set_user_attr("answers_computed", 0)
    twin_record = TrialRecord.of(twin)
    constraints = dict(twin_record.constraints or {})
    if twin_record.is_reference and twin_record.item_passed:
        # The reference's twin is still a candidate: judged like every other one (a zero
        # difference), not left without a comparison.
        paired = judge(stored_accuracy(twin), twin, space)
        trial.set_user_attr("paired_vs_reference", paired.to_dict())
    record_constraints(trial, constraints)
    return list(twin.values)


class Objective:
    """What study.optimize calls for each trial."""

    def __init__(
        self,
        plan: StudyPlan,
        progress: Progress,
        launches: LaunchScheduler,
        budget: Budget,
        spool: Spool,
        *,
        target: int | None = None,
        gate: InterruptGate | None = None,
    ) -> None:
        """`target`: the study's trial target, shared with other workers. `gate`: where Ctrl-C
        may land (autotune.study.interrupts)."""
        self.gate = gate or InterruptGate()
        self.plan = plan
        self.target = target
        self.progress = progress
        self.launches = launches
        self.budget = budget
        self.spool = spool
        self.artifacts = ArtifactRecorder(plan.storage_url, plan.study_name)
        # The trial in progress (the last one, once study.optimize has returned or raised).
        self.current: optuna.Trial | None = None

    def __call__(self, trial: optuna.Trial) -> list[float]:
        self.current = trial
        self.started = time.perf_counter()
        self.recording_from: float | None = None  # set once the engine has answered
        time_s: dict[str, float] = {"startup": 0.0}
        self.gate.open = True  # Ctrl-C from here on is this trial's to record
        try:
            trial.set_user_attr("owner", owner())
            self.gate.raise_pending()  # a Ctrl-C that landed while Optuna created the trial
            if self.target is not None and is_surplus(trial.study, trial.number, self.target):
                trial.study.stop()
                trial.set_user_attr("failure_kind", SURPLUS)
                reason = "the trial target was reached by trials other workers started first"
                trial.set_user_attr("failure_reason", reason)
                raise TrialFailure(reason, kind=SURPLUS)
            return self._run(trial, time_s)
        except KeyboardInterrupt:
            # Optuna records the trial as failed; say why, so a resumed run need not guess.
            trial.set_user_attr("failure_kind", "interrupted")
            trial.set_user_attr("failure_reason", "interrupted (Ctrl-C) before it ended")
            raise
        finally:
            self.gate.open = False
            now = time.perf_counter()
            if self.recording_from is not None:
                # Judging, spooling, the storage's writes and the sample-output artifact.
                time_s["recording"] = now - self.recording_from
            time_s["total"] = now - self.started
            trial.set_user_attr("time_s", time_s)

    def _run(self, trial: optuna.Trial, time_s: dict[str, float]) -> list[float]:
        proposal = self._propose(trial)
        if proposal.twin_possible:
            waited = time.perf_counter()
            twin = identical_trial(
                trial.study,
                proposal.config,
                number=trial.number,
                timeout_s=self.plan.space.trial_timeout_s,
            )
            time_s["twin_wait"] = time.perf_counter() - waited
            if twin is not None:
                return copy_twin(trial, twin, self.plan.space)
        run = self._measure(trial, proposal, time_s)
        self.recording_from = time.perf_counter()
        if run.rival is not None and run.result.stop_reason == RACED:
            m = to_measurement(
                self.plan.space, run.config, run.result, startup_s=run.startup_s,
                evalset=self.plan.evalset, measure_accuracy=False,
            )  # fmt: skip
            time_s.update(m.time_s)
            record_raced(trial, m, run.rival, run.launch_id, run.result.stop_rule_trail)
        report_running_rate(trial, run.result.stop_rule_trail)
        verdict = judge_run(self.plan, run, time_s)
        if verdict.measurement.unequal_work is not None:
            self.progress.note(
                f"trial {trial.number}: unequal work, not ranked on tokens/s: "
                f"{verdict.measurement.unequal_work}"
            )
        return self._record(trial, verdict, time_s)

    def _propose(self, trial: optuna.Trial) -> _Proposal:
        """The configuration to measure: the reference's, a named candidate's, or the
        sampler's."""
        space = self.plan.space
        record = TrialRecord.of(trial)
        is_reference, candidate = record.is_reference, record.candidate
        fixed = None
        if is_reference:
            fixed = space.reference_config()
        elif candidate:
            if space.find_candidate(str(candidate)) is None:
                reason = (
                    f"named candidate {candidate!r} was queued by an earlier run and is in "
                    "neither this run's space nor its --enqueue file"
                )
                fail_trial(trial, TrialFailure(reason, kind="error"), self.artifacts)
            fixed = space.candidate_config(str(candidate))
        config = suggest(space, trial, fixed=fixed)
        output_key = accuracy_key(config, self.plan.evalset)
        trial.set_user_attr("config", config.model_dump())
        trial.set_user_attr("output_key", output_key)
        self.progress.trial_started(trial.number, config)
        return _Proposal(
            config, output_key, is_reference, twin_possible=not (is_reference or candidate)
        )

    def _measure(self, trial: optuna.Trial, proposal: _Proposal, time_s: dict[str, float]) -> _Run:
        """The load test (and accuracy pass, unless an earlier trial's answers are reused) on
        the launch the scheduler gives; a failure fails this trial alone."""
        plan, space, config = self.plan, self.plan.space, proposal.config
        # Another worker may still be measuring the reference: measure now, judge after.
        reference = None if proposal.is_reference else reference_trial(trial.study)
        cached = find_reusable(trial.study, proposal.output_key)
        measure_accuracy = cached is None and not plan.dummy_weights
        rival = None
        if space.workload.racing and not proposal.is_reference:
            rival = incumbent(trial.study, spread_rel=spread_of(space))
        ids = [item.id for item in plan.evalset.items]
        try:
            session, launched = self.launches.session_for(config, self.progress.phase)
            trial.set_user_attr("launch_id", session.launch_id)
            trial.set_user_attr("launch_started", launched)
            if self.launches.gpus:
                trial.set_user_attr("gpus", [gpu.to_dict() for gpu in self.launches.gpus])
                trial.set_user_attr("gpu_share", self.launches.gpu_share)
            if launched:
                time_s["startup"] = session.startup_s
                time_s["gpu_wait"] = self.launches.gpu_wait_s
            measure = measure_plan(
                space,
                config,
                accuracy_ids=ids if measure_accuracy else None,
                # Random weights answer noise: no accuracy pass, no screening (dummy_weights).
                screening=None
                if cached or plan.dummy_weights
                else screening_request(space, plan.evalset, reference),
                max_seconds=self._measure_seconds(trial.study),
                race=None if rival is None else rival.bound,
            )
            result = session.measure(config, measure, on_phase=self.progress.phase)
            if reference is None and not proposal.is_reference:
                reference = await_reference(trial.study, space)
        except TrialFailure as failure:
            fail_trial(trial, failure, self.artifacts, started="launch_id" in trial.user_attrs)
        return _Run(
            config, result, session.startup_s, session.launch_id, measure_accuracy, reference,
            cached, rival,
        )  # fmt: skip

    def _record(
        self, trial: optuna.Trial, verdict: _Verdict, time_s: dict[str, float]
    ) -> list[float]:
        """Spooled before it goes to the storage, so a storage that refuses the writes
        (locked, full) costs no measurement."""
        m = verdict.measurement
        # What the trial stores must read back as a TrialRecord: a writer that breaks the
        # record fails here, in its own trial, not later in `best` or `report`.
        TrialRecord.from_attrs({**trial.user_attrs, **verdict.attrs}, number=trial.number)
        if not m.screened_out:
            # Only what was recorded: a null would stand for a value the trial never had.
            earlier = {k: trial.user_attrs[k] for k in _RECORDED_EARLY if k in trial.user_attrs}
            payload = {**earlier, **verdict.attrs, "time_s": time_s}
            self.spool.write(trial.number, spool_payload(trial, verdict.values, payload))
        for key, value in verdict.attrs.items():
            trial.set_user_attr(key, value)
        record_constraints(trial, verdict.constraints)
        self.artifacts.sample_outputs(trial, self.plan.evalset, m)
        if m.screened_out:
            raise optuna.TrialPruned(
                f"screening: accuracy already below the floor on {len(m.predictions)} items"
            )
        return verdict.values

    def _measure_seconds(self, study: optuna.Study) -> float | None:
        """How long the load test may run so the trial ends inside the budget."""
        left = self.budget.remaining(study)
        if left is None:
            return None
        used = time.perf_counter() - self.started  # this trial's start-up, so far
        return max(MIN_MEASURE_S, left - used - self.budget.overhead(study))
