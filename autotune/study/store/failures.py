"""Why a trial failed, wherever that was recorded: its own attributes, or (where Optuna had
finished the trial before autotune could say why) an attribute of its study."""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial

from autotune import variables
from autotune.records.parts import Failure
from autotune.records.stored import StudyRecord
from autotune.records.writer import write_study

HEARTBEAT_GRACE_ENV = "AUTOTUNE_HEARTBEAT_GRACE_S"


def heartbeat_grace_s() -> int:
    """How long a trial's process may send no heartbeat before the next run or host fails it
    (autotune.variables: 120 s, 2 s to a day: Optuna takes it as a timedelta, which a huge
    number overflows)."""
    grace: int = variables.read(HEARTBEAT_GRACE_ENV)
    return grace


# A study attribute per trial Optuna's heartbeat failed: the trial itself is FAIL by then, and
# Optuna refuses any write to a finished trial.
LOST_ATTR_PREFIX = "lost_trial_"


def record_failure(study: optuna.Study, number: int, kind: str, reason: str) -> None:
    """Why trial `number` failed, kept in the study: the trial is finished already."""
    failure = Failure(failure_kind=kind, failure_reason=reason)
    write_study(study, StudyRecord.part(**{f"{LOST_ATTR_PREFIX}{number}": failure}))


def record_stale(study: optuna.Study, trial: FrozenTrial) -> None:
    """Optuna failed a trial whose process stopped sending heartbeats: say so, for the
    trial, in the study (see failure_of)."""
    reason = (
        "its process stopped sending heartbeats (killed, or its machine went away); failed "
        f"by a later run after {heartbeat_grace_s()} s"
    )
    record_failure(study, trial.number, "lost", reason)


def failure_of(study: optuna.Study, trial: FrozenTrial) -> Failure:
    """A failed trial's failure kind and reason, wherever they were recorded (an empty
    Failure: none was)."""
    found = Failure.recorded(trial.user_attrs)
    if found:
        return found
    # A study attribute, written when Optuna's heartbeat had already finished the trial.
    lost = study.user_attrs.get(f"{LOST_ATTR_PREFIX}{trial.number}")
    return Failure.recorded(lost) if isinstance(lost, dict) else Failure()
