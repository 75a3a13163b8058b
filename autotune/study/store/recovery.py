"""Nothing lost: trials whose process died, results the storage could not take, and why a
trial failed.

Every trial records its owner (host, pid, process start time). A run that finds a RUNNING
trial whose owner on this host is gone fails it at once, with the reason, instead of waiting
for the heartbeat's grace period.

Every measured trial is written to a spool file before its figures go to the storage, and
the file is removed once the storage holds the finished trial. When the storage refuses a
write (locked past its retries, disk full), the file stays, and the next run records it as a
new trial (`recovered_from_trial`). The spool lives beside a SQLite study; when that disk is
full, in the temporary folder.

Why a trial failed is read wherever it was recorded (`failure_of`): its own attributes, or,
where Optuna had finished the trial before autotune could say why, an attribute of its study.
"""

from __future__ import annotations

import functools
import os
import socket
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import optuna
import psutil
from optuna.distributions import distribution_to_json, json_to_distribution
from optuna.trial import FrozenTrial, TrialState

from autotune import variables
from autotune.records.parts import Failure, Owner, owner_of, same_configuration
from autotune.records.readable import unreadable_because
from autotune.records.stored import FailureNote, SpooledTrial, StudyRecord, TrialRecord
from autotune.records.writer import write_finished_trial, write_study
from autotune.study.store.optuna_private import storage_of, trial_id
from autotune.study.store.spool import FAILED, Spool, UnsafeSpool

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


__all__ = [
    "FAILED",
    "Spool",
    "end_failed",
    "fail_orphaned",
    "fail_stale",
    "owner",
    "recover",
    "spool_payload",
]

# Names this host in trial owners where host names are not unique (containers started from
# one image can share one), and lets tests play a second host on one machine.
HOST_ENV = "AUTOTUNE_HOST"


def host_name() -> str:
    named: str | None = variables.read(HOST_ENV)
    return named or socket.gethostname()


def owner(worker: int | None = None) -> Owner:
    """Who runs a trial: enough to tell, on this host, whether that process is still there;
    `worker`: its slot in a run of several workers (none recorded with one)."""
    me = psutil.Process()
    slot = {} if worker is None else {"worker": worker}
    return Owner(host=host_name(), pid=me.pid, started=me.create_time(), **slot)


def _owner_gone(record: Owner) -> bool:
    if record.host != host_name():
        return False  # another machine's trial: its heartbeat decides
    if record.pid is None:
        return True
    try:
        started = psutil.Process(record.pid).create_time()
    except (psutil.Error, ValueError):
        return True
    return abs(started - (record.started or 0.0)) > 1.0


def fail_orphaned(study: optuna.Study, *, why: dict[int, str] | None = None) -> list[str]:
    """Fail RUNNING trials whose process on this host is gone; one line for each.

    `why`: what is known of a pid's end (a coordinator saw its worker die of a signal).
    """
    notes = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        record = owner_of(trial.user_attrs)
        if record is None or not _owner_gone(record):
            continue
        known = (why or {}).get(record.pid) if record.pid is not None else None
        reason = f"its process (pid {record.pid} on {record.host}) is gone: " + (
            known or "the run was killed or interrupted before the trial ended"
        )
        _fail(study, trial, "orphaned", reason)
        notes.append(f"trial {trial.number} failed: {reason}")
    return notes


def end_failed(
    study: optuna.Study, trial: FrozenTrial, attrs: TrialRecord, *, claim: bool = False
) -> bool:
    """End `trial`, which this process does not run, as FAIL with `attrs` (why it ended)
    written first: a finished trial takes no attributes. With `claim`, a waiting trial is
    first started the way Optuna starts one (WAITING to RUNNING, which only one process can
    do); False when another process started it first (it runs there, untouched)."""
    storage, stored_id = storage_of(study), trial_id(trial)
    if claim and not storage.set_trial_state_values(stored_id, TrialState.RUNNING):
        return False
    write_finished_trial(storage, stored_id, trial.number, attrs)
    storage.set_trial_state_values(stored_id, TrialState.FAIL)
    return True


def _fail(study: optuna.Study, trial: FrozenTrial, kind: str, reason: str) -> None:
    end_failed(study, trial, TrialRecord.part(failure_kind=kind, failure_reason=reason))


def fail_stale(study: optuna.Study) -> list[str]:
    """Fail RUNNING trials whose heartbeat stopped longer than the grace period ago (a process
    on another host that died), through Optuna's own heartbeat check; one line for each.

    Optuna checks only when this process starts a trial: done here first, a dead host's trial
    neither counts towards --trials nor stays RUNNING when this run has nothing left to do.
    """
    before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    if not before:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    still = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    return [
        f"trial {number} failed: its process stopped sending heartbeats (killed, or its "
        "machine went away)"
        for number in sorted(before - still)
    ]


# A spool file that holds no measurement is set aside under its name with this suffix.
UNREADABLE_SUFFIX = ".unreadable"


def set_aside(path: Path, why: str) -> str:
    """Keep an unreadable spool file out of the way (renamed, not deleted: a person may want to
    look at it); the line that says so."""
    kept = path.with_name(path.name + UNREADABLE_SUFFIX)
    try:
        os.replace(path, kept)
    except OSError as exc:
        return f"the spool file {path} holds no measurement ({why}); cannot move it: {exc}"
    return (
        f"discarded the spool file {path}: it holds no measurement autotune can record "
        f"({why}); kept as {kept.name}"
    )


def spool_payload(
    trial: optuna.Trial,
    values: list[float],
    user_attrs: dict[str, Any],
    *,
    state: TrialState = TrialState.COMPLETE,
) -> dict[str, Any]:
    """What the spool keeps of a trial that ended COMPLETE (with its values) or PRUNED by
    racing (none): enough to record it again when the storage refused it."""
    started = trial.datetime_start
    return {
        "number": trial.number,
        "state": state.name,
        # Which trial of which study: another study later made at the same path under the same
        # name has its own trial with this number, started at another time.
        "started": started.isoformat() if started is not None else None,
        "values": values,
        "params": trial.params,
        "distributions": {k: distribution_to_json(d) for k, d in trial.distributions.items()},
        "user_attrs": user_attrs,
    }


# The states of a trial whose spooled results the storage took after all.
_RECORDED = (TrialState.COMPLETE, TrialState.PRUNED)
# The states of a trial whose measured results the storage may have refused: it was started,
# and its end was either never written or written as a failure.
_REFUSED_STATES = (TrialState.RUNNING, TrialState.FAIL)


def _not_its_trial(
    original: FrozenTrial | None, number: int, started: datetime | None
) -> str | None:
    """Why a spooled file is not about `original`, the study's trial of its number (None when
    it is): a measured trial always exists in the storage (it is created before it is
    measured), started when the file says, and was not completed."""
    if original is None:
        return f"this study has no trial {number}"
    if original.state not in _REFUSED_STATES:
        return f"trial {number} is {original.state.name}, not a trial left unfinished"
    if started is None:
        return "it records no start time"
    # Within a second: a storage may keep the instant at a coarser precision.
    if original.datetime_start is None or (
        abs((original.datetime_start - started).total_seconds()) >= 1
    ):
        return f"trial {number} started at {original.datetime_start}, not at {started}"
    return None


def _not_this_study(original: FrozenTrial | None, spooled: SpooledTrial) -> str | None:
    """Why a spooled measurement is not one of this study's started trials, or None."""
    why = _not_its_trial(original, spooled.number, spooled.started)
    if why is not None or original is None:
        return why
    if original.params != spooled.params or not same_configuration(
        original.user_attrs, spooled.user_attrs
    ):
        return f"its configuration is not the one trial {spooled.number} measured"
    return None


_Read = TypeVar("_Read")

# What Optuna raises on parameters and distributions it cannot take.
_BAD_TRIAL = (AttributeError, IndexError, KeyError, TypeError, ValueError)


def _spooled_trial(
    path: Path, *, read: Callable[[Path], str], objectives: int
) -> tuple[SpooledTrial, FrozenTrial]:
    """The spooled trial at `path` and the finished trial to record (completed, or stopped by
    racing); ValueError saying why when it holds no measurement of this study."""
    spooled = SpooledTrial.read(read(path))
    if path.name != f"trial-{spooled.number}.json":
        raise ValueError(f"number: {spooled.number} in the file of another trial")
    if spooled.values and len(spooled.values) != objectives:
        raise ValueError(f"values: {len(spooled.values)} for {objectives} objective(s)")
    attrs = dict(spooled.user_attrs)
    constraints = attrs.get("constraints") or {}
    try:
        frozen = optuna.trial.create_trial(
            state=TrialState[spooled.state],
            values=spooled.values or None,
            params=spooled.params,
            distributions={k: json_to_distribution(d) for k, d in spooled.distributions.items()},
            user_attrs={**attrs, "recovered_from_trial": spooled.number},
            system_attrs={f"constraints:{k}": float(v) for k, v in constraints.items()},
        )
    except _BAD_TRIAL as exc:
        raise ValueError(f"params: {type(exc).__name__}: {exc}") from None
    # Checked as `best` reads a stored trial: what it could not read is not recorded.
    problem = unreadable_because(frozen, objectives)
    if problem is not None:
        raise ValueError(problem)
    return spooled, frozen


def _read_each(
    paths: list[Path], read: Callable[[Path], _Read], notes: list[str]
) -> Iterator[tuple[Path, _Read]]:
    """Each spool file with what `read` makes of it; one that holds nothing readable is set
    aside, and `notes` says so."""
    for path in paths:
        try:
            found = read(path)
        except ValueError as exc:
            notes.append(set_aside(path, str(exc)))
            continue
        except UnsafeSpool as exc:
            notes.append(str(exc))
            continue
        except OSError as exc:
            notes.append(f"cannot read the spool file {path}: {exc.strerror or exc}")
            continue
        yield path, found


def recover(study: optuna.Study, spool: Spool) -> list[str]:
    """Record the spooled results the storage never took, and the reasons of trials that
    failed when it refused them; one line for each, and for each file set aside."""
    notes = spool.refused()
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    read = functools.partial(_spooled_trial, read=spool.read, objectives=len(study.directions))
    # A trial's results can sit in both spool folders (kept beside the study, then again in
    # the temporary folder when that disk filled): recorded once, the other copy dropped.
    recorded_now: set[int] = set()
    for path, (spooled, frozen) in _read_each(spool.pending(), read, notes):
        number = spooled.number
        original: FrozenTrial | None = trials.get(number)
        if number in recorded_now or (original is not None and original.state in _RECORDED):
            path.unlink(missing_ok=True)  # recorded after all
            continue
        why = _not_this_study(original, spooled)
        if why is not None:
            # Left by an earlier study of this name at this path (deleted since), or forged:
            # not results this study measured.
            path.unlink(missing_ok=True)
            notes.append(
                f"discarded the spooled results of a trial {number} that is not this study's "
                f"({why}): nothing recorded"
            )
            continue
        study.add_trial(frozen)
        recorded_now.add(number)
        recovered = max(t.number for t in study.get_trials(deepcopy=False))
        _record_reason(
            study,
            original,
            "recovered",
            f"its results could not be stored then; recorded as trial {recovered}",
        )
        path.unlink(missing_ok=True)
        notes.append(
            f"recorded the results of trial {number}, which the storage could not take then, "
            f"as trial {recovered}"
        )
    return notes + _recover_reasons(study, spool)


def _record_reason(study: optuna.Study, trial: FrozenTrial | None, kind: str, reason: str) -> bool:
    """Say why `trial` ended where it says nothing yet: a RUNNING trial is failed with the
    reason, a finished one gets it as a study attribute (it takes no attributes itself)."""
    if trial is None:
        return False
    if trial.state == TrialState.RUNNING:
        _fail(study, trial, kind, reason)
        return True
    if trial.state == TrialState.FAIL and not failure_of(study, trial):
        record_failure(study, trial.number, kind, reason)
        return True
    return False


def _failure_note(path: Path, *, read: Callable[[Path], str]) -> FailureNote:
    note: FailureNote = FailureNote.read(read(path))
    return note


def _recover_reasons(study: optuna.Study, spool: Spool) -> list[str]:
    """Record the failure notes of trials that ended while the storage refused writes."""
    notes = []
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    read = functools.partial(_failure_note, read=spool.read)
    for path, note in _read_each(spool.pending(FAILED), read, notes):
        original = trials.get(note.number)
        # A trial still RUNNING is fail_orphaned's (or its live owner's) to end.
        failed = original is not None and original.state == TrialState.FAIL
        if (
            failed
            and _not_its_trial(original, note.number, note.started) is None
            and _record_reason(study, original, note.kind, note.reason)
        ):
            notes.append(f"trial {note.number} failed: {note.reason}")
        path.unlink(missing_ok=True)
    return notes
