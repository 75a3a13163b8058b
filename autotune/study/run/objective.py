"""One Optuna trial: propose, measure on the right launch, judge, record.

Each trial runs its request-time settings on the launch the scheduler provides
(autotune.study.run.measuring, planned for its role by autotune.study.run.trial_plan), records
its figures as user attributes, its constraint values, how its time was spent and whether its
export reproduces on the deploy target. A failed trial is a FAIL with its reason, and the
study goes on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NoReturn

import optuna
from optuna.trial import TrialState

from autotune.accuracy.confirm import search_order
from autotune.accuracy.floor import infeasible_because
from autotune.accuracy.reuse import accuracy_key
from autotune.engines.measurement import Measurement, to_measurement
from autotune.errors import TrialFailure
from autotune.export.reproduce import reproduction
from autotune.measure.convergence import RACED
from autotune.records.parts import Environment, FloorVerdict, Paired, with_entries
from autotune.records.stored import TrialRecord
from autotune.records.writer import end_trial, write_trial
from autotune.space.sampling import suggest
from autotune.study.plan import StudyPlan
from autotune.study.proposals.steering import Steering
from autotune.study.results.counting import FAILURE_WORDS, is_surplus
from autotune.study.results.progress import SURPLUS, Progress
from autotune.study.results.select import CONSTRAINT_NAMES, DEPLOYABLE
from autotune.study.results.timeshare import timed
from autotune.study.run.budget import Budget
from autotune.study.run.interrupts import InterruptGate
from autotune.study.run.launches import LaunchScheduler
from autotune.study.run.measuring import MeasuredRun, MeasureStep
from autotune.study.run.racing import raced_attrs
from autotune.study.run.reference_load import ReferenceStages
from autotune.study.run.runtime import REAL, Runtime
from autotune.study.run.trial_plan import Proposal, queued_config
from autotune.study.run.twins import (
    TrialAnswers,
    copy_raced_twin,
    copy_twin,
    identical_trial,
)
from autotune.study.run.verdicts import (
    confirmation_verdict,
    constraint_values,
    identical_answers,
    judge_absolute,
    judge_paired,
    record_constraints,
)
from autotune.study.store.recovery import Spool, owner, spool_payload
from autotune.study.store.spool import ArtifactRecorder

# The memory constraint of a trial that ran out of memory: far beyond any measured one.
OOM_VIOLATION = 1e9
# Attributes set before the measurement, kept with it in the spool.
_RECORDED_EARLY = (
    "config",
    "output_key",
    "owner",
    "launch_id",
    "launch_started",
    "is_reference",
    "candidate",
    "baseline",
    "gpus",
    "gpu_share",
    "first_figure",
    "machine",
)


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
    write_trial(
        trial,
        TrialRecord.part(
            failure_kind=failure.kind,
            failure_reason=failure.reason,
            log_tail=failure.log_tail[-4000:],
        ),
    )
    artifacts.log_tail(trial, failure.log_tail)
    if failure.kind != "oom" and started:
        raise failure
    constraints = {**dict.fromkeys(CONSTRAINT_NAMES, 0.0), DEPLOYABLE: 0.0}
    violated = "memory" if failure.kind == "oom" else DEPLOYABLE
    record_constraints(trial, {**constraints, violated: OOM_VIOLATION})
    raise optuna.TrialPruned(f"{FAILURE_WORDS.get(failure.kind, failure.kind)}: {failure.reason}")


@dataclass(frozen=True)
class _Verdict:
    measurement: Measurement
    record: TrialRecord  # what the trial records, beside its constraints (a part, typed)
    constraints: dict[str, float]
    values: list[float]  # the objectives, in the space's order
    raced: str | None = None  # why racing stopped it (it ends PRUNED, with no values)


def raced_verdict(plan: StudyPlan, run: MeasuredRun, time_s: dict[str, float]) -> _Verdict:
    """A trial racing stopped: its partial figures and the incumbent it lost to; no accuracy,
    no constraints, no values (autotune.study.run.racing)."""
    assert run.rival is not None
    m = to_measurement(
        plan.space,
        run.config,
        run.result,
        startup_s=run.startup_s,
        evalset=plan.evalset,
        measure_accuracy=False,
    )
    time_s.update(m.time_s)
    record, reason = raced_attrs(m, run.rival, run.launch_id, run.result.stop_rule_trail)
    return _Verdict(m, record, {}, [], raced=reason)


def judged(
    trial: optuna.Trial,
    plan: StudyPlan,
    run: MeasuredRun,
    time_s: dict[str, float],
    artifacts: ArtifactRecorder,
) -> _Verdict:
    """The verdict on a run (stopped by racing, or to be judged); the trial fails when its
    load is no measurement (a load without tokens: autotune.measure.summary)."""
    raced = run.rival is not None and run.result.stop_reason == RACED
    try:
        return (raced_verdict if raced else judge_run)(plan, run, time_s)
    except TrialFailure as failure:
        if run.not_judged is not None:  # no measurement: it answered nothing after screening
            write_trial(trial, TrialRecord.part(accuracy_not_judged=run.not_judged))
        fail_trial(trial, failure, artifacts)


def judge_run(plan: StudyPlan, run: MeasuredRun, time_s: dict[str, float]) -> _Verdict:
    """The figures, the paired comparison with the reference, the constraint values and
    whether the export reproduces the trial: everything the trial records from here on."""
    space = plan.space
    m = to_measurement(
        space,
        run.config,
        run.result,
        startup_s=run.startup_s,
        evalset=plan.evalset,
        # Not judged: its few answers (screening's) are kept, no accuracy figure from them.
        measure_accuracy=not plan.dummy_weights and run.not_judged is None,
    )
    m.environment = with_entries(m.environment, launch_id=run.launch_id, **run.overlap)
    time_s.update(m.time_s)
    record = TrialRecord.part(answers_computed=run.computed)
    if run.answers.source is not None:  # a trial's number, or the answers cache's entry
        record = TrialRecord.part(accuracy_reused_from=run.answers.source).joined(record)
    if run.rival is not None and run.rival.check is not None:  # a racing stop, withdrawn
        record = record.joined(TrialRecord.part(race_check=run.rival.check))
    measured = m.user_attrs()
    record = record.joined(measured.untimed())
    paired = None
    same_answers = False
    if run.not_judged is not None:  # its answers could not change the recommendation
        record = record.joined(TrialRecord.part(accuracy_not_judged=run.not_judged))
    elif run.reference is not None and m.accuracy is not None:
        searched = search_order(space, plan.evalset)  # the held-out items aside
        same_answers = identical_answers(m.predictions, run.reference.predictions, searched)
        paired = judge_paired(
            m.accuracy, run.reference.report, space, plan.evalset, same_answers=same_answers
        )
        record = record.joined(TrialRecord.part(paired_vs_reference=Paired.of(paired.to_dict())))
    reference = run.reference.report if run.reference is not None else None
    confirmed = confirmation_verdict(
        run.reused_confirmation, run.confirm, paired, m.accuracy, reference
    )
    record = record.joined(TrialRecord.part(**confirmed))
    if run.not_confirmed is not None:  # the floor passed it, slower than a confirmed trial
        record = record.joined(TrialRecord.part(confirmation_skipped=run.not_confirmed))
    absolute = None if m.accuracy is None else judge_absolute(m.accuracy, space, plan.evalset)
    if absolute is not None:
        floor = FloorVerdict.of(dataclasses.asdict(absolute))
        record = record.joined(TrialRecord.part(accuracy_floor=floor))
    constraints = constraint_values(space, m, paired, same_answers=same_answers, absolute=absolute)
    check = reproduction(
        TrialRecord(config=m.config.model_dump(), environment=Environment.of(m.environment)),
        None if plan.endpoint else space.deploy,
    )
    # A trial that did not do the forced work is no more a recommendation than one that does
    # not reproduce: the sampler learns to leave both (autotune.measure.equal_work).
    constraints[DEPLOYABLE] = 0.0 if check.deployable and m.unequal_work is None else 1.0
    record = record.joined(
        TrialRecord.part(
            deployable=check.deployable, deployability=check.reason, constraints=constraints
        )
    )
    because = infeasible_because(record, space.constraints)
    if run.not_judged is not None:  # never feasible: its accuracy is unknown
        because.append(run.not_judged.line())
    record = record.joined(TrialRecord.part(infeasible_because=because))
    # A screened-out trial ran no load test: it has no objective values, only its pruning.
    figures = measured.written()
    values = [] if m.screened_out else [float(figures[o.metric]) for o in space.objectives]
    return _Verdict(m, record, constraints, values)


class Objective:
    """What study.optimize calls for each trial."""

    def __init__(
        self,
        plan: StudyPlan,
        progress: Progress,
        launches: LaunchScheduler,
        steering: Steering,
        budget: Budget,
        spool: Spool,
        *,
        target: int | None = None,
        gate: InterruptGate | None = None,
        runtime: Runtime = REAL,
    ) -> None:
        """`target`: the study's trial target, shared with other workers. `gate`: where Ctrl-C
        may land (autotune.study.run.interrupts). `runtime`: the clock the time split reads."""
        self.gate = gate or InterruptGate()
        self.clock = runtime.clock
        self.plan = plan
        self.target = target
        self.progress = progress
        self.steering = steering
        self.spool = spool
        self.artifacts = ArtifactRecorder(plan.storage_url, plan.study_name)
        # Every trial's answers, and the reference's a stage at a time (study/run/twins.py).
        self.answers = TrialAnswers(plan, ReferenceStages(plan, launches, progress))
        self.measuring = MeasureStep(
            plan, progress, launches, budget, self.answers, self.gate, runtime.clock
        )
        # The trial in progress (the last one, once study.optimize has returned or raised).
        self.current: optuna.Trial | None = None

    def __call__(self, trial: optuna.Trial) -> list[float]:
        self.current = trial
        self.started = self.clock()
        self.recording_from: float | None = None  # set once the engine has answered
        time_s: dict[str, float] = {"startup": 0.0}
        self.gate.open = True  # Ctrl-C from here on is this trial's to record
        try:
            slot = self.plan.worker if self.plan.workers > 1 else None
            write_trial(trial, TrialRecord.part(owner=owner(slot), **self.plan.machine_attrs()))
            self.gate.raise_pending()  # a Ctrl-C that landed while Optuna created the trial
            if self.target is not None and is_surplus(trial.study, trial.number, self.target):
                trial.study.stop()
                reason = "the trial target was reached by trials other workers started first"
                write_trial(trial, TrialRecord.part(failure_kind=SURPLUS, failure_reason=reason))
                raise TrialFailure(reason, kind=SURPLUS)
            return self._run(trial, time_s)
        except KeyboardInterrupt:
            self.gate.delivered = True
            # Optuna records the trial as failed; say why, so a resumed run need not guess.
            interrupted = "interrupted (Ctrl-C) before it ended"
            failed = TrialRecord.part(failure_kind="interrupted", failure_reason=interrupted)
            write_trial(trial, failed)
            raise
        finally:
            self.gate.open = False
            now = self.clock()
            if self.recording_from is not None:
                # Judging, spooling, the storage's writes and the sample-output artifact.
                time_s["recording"] = now - self.recording_from
            time_s["total"] = now - self.started
            write_trial(trial, TrialRecord.part(time_s=time_s))

    def _run(self, trial: optuna.Trial, time_s: dict[str, float]) -> list[float]:
        with timed(time_s, "proposal"):  # the parts of `time_s`: autotune.study.results.timeshare
            proposal = self._propose(trial)
        if proposal.sampled:
            waited = self.clock()
            twin = identical_trial(
                trial.study,
                proposal.config,
                number=trial.number,
                timeout_s=self.plan.space.trial_timeout_s,
            )
            time_s["twin_wait"] = self.clock() - waited
            if twin is not None and twin.state == TrialState.PRUNED:
                copy_raced_twin(trial, twin)
            if twin is not None:
                return copy_twin(trial, twin, self.plan.space, self.plan.evalset)
        run = self._measure(trial, proposal, time_s)
        self.recording_from = self.clock()
        verdict = judged(trial, self.plan, run, time_s, self.artifacts)
        if verdict.raced is not None:
            return self._record(trial, verdict, time_s)
        if verdict.measurement.unequal_work is not None:
            self.progress.note(
                f"trial {trial.number}: unequal work, not ranked on tokens/s: "
                f"{verdict.measurement.unequal_work}"
            )
        return self._record(trial, verdict, time_s)

    def _propose(self, trial: optuna.Trial) -> Proposal:
        """The configuration to measure: the reference's, a named candidate's, or the
        sampler's."""
        space = self.plan.space
        record = TrialRecord.of(trial)
        try:
            fixed = queued_config(space, record)
        except TrialFailure as failure:  # a name this run's space no longer has
            fail_trial(trial, failure, self.artifacts)
        # The baseline asks the sampler for nothing: its launch values are no point of the
        # search, and a trial with only some of its parameters splits TPE's groups of them.
        config = fixed if record.baseline and fixed else suggest(space, trial, fixed=fixed)
        output_key = accuracy_key(config, self.plan.evalset)
        write_trial(trial, TrialRecord.part(config=config.model_dump(), output_key=output_key))
        self.progress.trial_started(trial.number, config)
        if (step := self.steering.step_of(trial)) is not None:
            write_trial(trial, TrialRecord.part(step=step.describe()))
        named = record.is_reference or record.candidate or record.baseline
        return Proposal(
            config, output_key, record.is_reference, not named, baseline=bool(record.baseline)
        )

    def _measure(
        self, trial: optuna.Trial, proposal: Proposal, time_s: dict[str, float]
    ) -> MeasuredRun:
        """The load test (and accuracy pass, unless the answers are known) on the launch the
        scheduler gives (autotune.study.run.measuring); a failure fails this trial alone."""
        with timed(time_s, "study_reads"):  # the reference's answers, reusable answers
            answers = self.answers.plan_for(
                trial.study,
                proposal.config,
                proposal.output_key,
                is_reference=proposal.is_reference,
            )
        try:
            return self.measuring.measure(trial, proposal, answers, time_s, started=self.started)
        except TrialFailure as failure:
            fail_trial(trial, failure, self.artifacts, started="launch_id" in trial.user_attrs)

    def _record(
        self, trial: optuna.Trial, verdict: _Verdict, time_s: dict[str, float]
    ) -> list[float]:
        """Every measured ending (completed, screened out, stopped by racing): checked as one
        TrialRecord, spooled before it goes to the storage (so a storage that refuses the
        writes, locked or full, costs no measurement), then stored."""
        m = verdict.measurement

        def keep() -> None:
            if m.screened_out:  # no figures to keep: its screening is redone on a rerun
                return
            # Only what was recorded: a null would stand for a value the trial never had.
            earlier = {k: trial.user_attrs[k] for k in _RECORDED_EARLY if k in trial.user_attrs}
            timed = TrialRecord.part(time_s=time_s)
            payload = TrialRecord.part(**earlier).joined(verdict.record, timed).written()
            state = TrialState.PRUNED if verdict.raced else TrialState.COMPLETE
            self.spool.write(
                trial.number, spool_payload(trial, verdict.values, payload, state=state)
            )

        end_trial(trial, verdict.record, keep=keep)
        if verdict.raced is not None:
            raise optuna.TrialPruned(verdict.raced)
        record_constraints(trial, verdict.constraints)
        self.artifacts.sample_outputs(trial, self.plan.evalset, m)
        if m.screened_out:
            raise optuna.TrialPruned(
                f"screening: the floor shows a drop past its margin on {len(m.predictions)} items"
            )
        return verdict.values
