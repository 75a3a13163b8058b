"""Configurations measured before: a repeated proposal copies its twin's figures, and a trial
whose reference another worker still runs waits for it."""

from __future__ import annotations

import time
from typing import Any, NoReturn

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.accuracy.reuse import stored_accuracy
from autotune.errors import TrialFailure
from autotune.evalset.dataset import EvalSet
from autotune.params import TrialConfig
from autotune.records.stored import TrialRecord
from autotune.records.writer import end_trial
from autotune.space import SearchSpace
from autotune.study.results.groups import group_of
from autotune.study.results.select import reference_trial
from autotune.study.run.verdicts import judge, record_constraints

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


def await_reference(study: optuna.Study, space: SearchSpace) -> FrozenTrial | None:
    """The completed reference; waits while another process (a shared study) still runs it.

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
            if TrialRecord.of(t).is_reference
        ]
        reference = reference_trial(study)
        if reference is not None or not needs_reference:
            return reference
        if not pending or time.monotonic() > deadline:
            raise TrialFailure(
                "no completed reference trial to compare with (it failed or is missing); "
                "run the study again to retry the reference",
                kind="no-reference",
            )
        time.sleep(TWIN_POLL_S)


def _inherited(twin: FrozenTrial) -> dict[str, Any]:
    """The twin's figures for the repeat, and where they came from; nothing was computed."""
    attrs = {key: value for key, value in twin.user_attrs.items() if key not in _NOT_INHERITED}
    return {**attrs, "duplicate_of": twin.number, "answers_computed": 0}


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
        paired = judge(stored_accuracy(twin), twin, space, evalset)
        attrs["paired_vs_reference"] = paired.to_dict()
    end_trial(trial, attrs)
    record_constraints(trial, constraints)
    return list(twin.values)


def copy_raced_twin(trial: optuna.Trial, twin: FrozenTrial) -> NoReturn:
    """The sampler proposed a configuration that lost its race: PRUNED again, with the twin's
    partial figures and reason, not re-run (and not counted, as any repeat)."""
    end_trial(trial, _inherited(twin))
    raise optuna.TrialPruned(str(TrialRecord.of(twin).raced_reason))
