"""A trial's measure step: its launch, its load test and accuracy pass, its answers settled.

The launch comes from the scheduler (autotune.study.run.launches), the plan from the trial's
role (autotune.study.run.trial_plan, which writes nothing: what it says is written here, with
the launch, before the load starts, so a trial that fails mid-load still says it). Ctrl-C
lands only between the engine's callbacks (autotune.study.run.interrupts). A failure is raised
to the objective, which records it (autotune.study.run.objective.fail_trial).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.accuracy.confirm import ConfirmRequest
from autotune.params import TrialConfig
from autotune.records import SessionResult
from autotune.records.parts import NotConfirmed, NotJudged
from autotune.records.stored import MEASURED_BESIDE, STARTUP_BESIDE, TrialRecord
from autotune.records.writer import write_trial
from autotune.study.plan import StudyPlan
from autotune.study.results.live import LiveEstimate
from autotune.study.results.progress import Progress
from autotune.study.results.timeshare import timed
from autotune.study.run.budget import Budget
from autotune.study.run.interrupts import InterruptGate
from autotune.study.run.launches import LaunchScheduler
from autotune.study.run.racing import Incumbent, measure_racing
from autotune.study.run.reference_load import ReferenceAnswers
from autotune.study.run.trial_plan import Proposal, launch_beside, plan_measure
from autotune.study.run.twins import AnswersPlan, TrialAnswers, await_reference


@dataclass(frozen=True)
class MeasuredRun:
    """What the measure step hands the judge (autotune.study.run.objective)."""

    config: TrialConfig
    result: SessionResult  # turned into the trial's figures by to_measurement; every answer
    startup_s: float
    launch_id: str
    answers: AnswersPlan  # where its answers came from (autotune.study.run.twins)
    computed: int  # the answers it computed itself
    reference: ReferenceAnswers | None  # None when this is the reference, or it failed
    rival: Incumbent | None = None  # the trial it raced (autotune.study.run.racing)
    # What ran beside its launch's start-up, or beside its measuring (environment entries).
    overlap: dict[str, str] = dataclasses.field(default_factory=dict)
    confirm: ConfirmRequest | None = None  # its confirmation, if the floor passes it
    # The verdict of the earlier trial whose answers it reuses: the same answers, the same one.
    reused_confirmation: dict[str, Any] | None = None
    # Why its accuracy was not judged (autotune.study.run.accuracy_gate); None: judged.
    not_judged: NotJudged | None = None
    # Why the floor passed it but it was not confirmed (slower than a confirmed trial).
    not_confirmed: NotConfirmed | None = None


@dataclass
class MeasureStep:
    """Measures one proposal on the launch the scheduler gives, within the study's budget;
    `answers` settles its answers against the reference's, `clock` times its parts."""

    plan: StudyPlan
    progress: Progress
    launches: LaunchScheduler
    budget: Budget
    answers: TrialAnswers
    gate: InterruptGate
    clock: Callable[[], float]

    def measure(
        self,
        trial: optuna.Trial,
        proposal: Proposal,
        answers: AnswersPlan,
        time_s: dict[str, float],
        *,
        started: float,
    ) -> MeasuredRun:
        """The load test (and accuracy pass, unless `answers` are known) of `proposal`, for
        a trial that started at `started` (the budget counts its start-up); TrialFailure
        when the launch, the load or the answers fail."""
        plan, space, config, study = self.plan, self.plan.space, proposal.config, trial.study
        then = launch_beside(plan, study, proposal)
        session, launched = self.launches.session_for(config, self.progress.phase, then=then)
        write_trial(trial, TrialRecord.part(launch_id=session.launch_id, launch_started=launched))
        overlap = launch_record(trial, self.launches, launched, then, time_s)
        used_s = self.clock() - started
        with timed(time_s, "study_reads"):  # the race, the budget, the first figure
            step = plan_measure(
                plan,
                study,
                proposal,
                answers,
                launch_id=session.launch_id,
                budget=self.budget,
                used_s=used_s,
            )
        if step.first_figure:
            write_trial(trial, TrialRecord.part(first_figure=True))
        live = LiveEstimate(trial, self.progress.estimate)
        # Each callback checks first for a Ctrl-C Python dropped (study/run/interrupts.py).
        phase, estimate = self.gate.checking(self.progress.phase), self.gate.checking(live.post)
        try:
            with timed(time_s, "engine_call"):  # a racing stop beside load is checked
                result, rival = measure_racing(
                    session, space, config, step.measure, step.rival, phase, estimate
                )
        finally:
            live.close()  # nothing is written to the trial once it is told
        self.gate.check()
        if launched and self.launches.beside_next:  # the pass the next start-up hid
            ended = self.clock()
            self.launches.accuracy_beside(ended - result.accuracy_s, ended)
        if not proposal.is_reference:
            await_reference(study, space, plan.group)
        with timed(time_s, "engine_call"):  # its floor past the reference's answers
            settled = self.answers.settle(study, trial.number, session, config, answers, result)
        return MeasuredRun(
            config,
            settled.result,
            session.startup_s,
            session.launch_id,
            answers,
            settled.computed,
            settled.reference,
            rival,
            overlap,
            settled.confirm,
            settled.reused_confirmation,
            settled.not_judged,
            settled.not_confirmed,
        )


def launch_record(
    trial: optuna.Trial,
    launches: LaunchScheduler,
    launched: bool,
    then: TrialConfig | None,
    time_s: dict[str, float],
) -> dict[str, str]:
    """The trial's GPUs and the start-up it waited for; what both records say (environment
    entries) when a launch started beside another: the reference was measured beside a
    starting server, whose start-up hid the reference's accuracy pass (how much of it: the
    next trial's entry)."""
    if launches.gpus:
        gpus = [gpu.to_dict() for gpu in launches.gpus]
        write_trial(trial, TrialRecord.part(gpus=gpus, gpu_share=launches.gpu_share))
    if not launched:
        return {}
    # What the trial waited for: less when it started beside another.
    time_s["startup"] = launches.startup_wait_s
    time_s["gpu_wait"] = launches.gpu_wait_s
    if then is not None and launches.beside_next:
        return {MEASURED_BESIDE: f"the next launch ({then.backend}) starting up"}
    if not launches.started_beside:
        return {}
    said = "started while the reference started and measured"
    if (hidden := launches.accuracy_overlap_s) is not None:
        inside, total = hidden
        said += f"; {inside:.1f} s of the reference's {total:.1f} s accuracy pass ran in it"
    return {STARTUP_BESIDE: said}
