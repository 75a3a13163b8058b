"""Nothing lost: trials whose process died, and results the storage could not take.

Every trial records its owner (host, pid, process start time). A run that finds a RUNNING
trial whose owner on this host is gone fails it at once, with the reason, instead of waiting
for the heartbeat's grace period.

Every measured trial is written to a spool file before its figures go to the storage, and
the file is removed once the storage holds the finished trial. When the storage refuses a
write (locked past its retries, disk full), the file stays, and the next run records it as a
new trial (`recovered_from_trial`). The spool lives beside a SQLite study; when that disk is
full, in the temporary folder.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import socket
import tempfile
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import optuna
import psutil
from optuna.distributions import distribution_to_json, json_to_distribution
from optuna.trial import FrozenTrial, TrialState

from autotune.records.stored import FailureNote, SpooledTrial
from autotune.study.failures import failure_of, record_failure
from autotune.study.storage import STUDIES_DIR, local_file

# Names this host in trial owners where host names are not unique (containers started from
# one image can share one), and lets tests play a second host on one machine.
HOST_ENV = "AUTOTUNE_HOST"


def host_name() -> str:
    return os.environ.get(HOST_ENV) or socket.gethostname()


def owner() -> dict[str, Any]:
    """Who runs a trial: enough to tell, on this host, whether that process is still there."""
    me = psutil.Process()
    return {"host": host_name(), "pid": me.pid, "started": me.create_time()}


def _owner_gone(record: dict[str, Any]) -> bool:
    if record.get("host") != host_name():
        return False  # another machine's trial: its heartbeat decides
    try:
        started = psutil.Process(int(record["pid"])).create_time()
    except (psutil.Error, KeyError, TypeError, ValueError):
        return True
    return abs(started - float(record.get("started", 0.0))) > 1.0


def fail_orphaned(study: optuna.Study, *, why: dict[int, str] | None = None) -> list[str]:
    """Fail RUNNING trials whose process on this host is gone; one line for each.

    `why`: what is known of a pid's end (a coordinator saw its worker die of a signal).
    """
    storage = study._storage
    notes = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        record = trial.user_attrs.get("owner")
        if not isinstance(record, dict) or not _owner_gone(record):
            continue
        known = (why or {}).get(record["pid"]) if type(record.get("pid")) is int else None
        reason = f"its process (pid {record.get('pid')} on {record.get('host')}) is gone: " + (
            known or "the run was killed or interrupted before the trial ended"
        )
        _fail(storage, trial, "orphaned", reason)
        notes.append(f"trial {trial.number} failed: {reason}")
    return notes


def _fail(storage: Any, trial: FrozenTrial, kind: str, reason: str) -> None:
    """Record why `trial` ended, then end it as FAIL (a finished trial takes no attributes)."""
    storage.set_trial_user_attr(trial._trial_id, "failure_kind", kind)
    storage.set_trial_user_attr(trial._trial_id, "failure_reason", reason)
    storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


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


class Spool:
    """Measured trials not yet known to be recorded, one JSON file per trial (and, for a
    trial that failed when the storage refused its end, a note of why)."""

    def __init__(self, storage_url: str, study_name: str) -> None:
        stored = local_file(storage_url)
        beside = stored.parent if stored is not None else STUDIES_DIR
        key = hashlib.sha256(f"{storage_url}\0{study_name}".encode()).hexdigest()[:12]
        self.folders = [
            beside / f"{study_name}-spool",
            Path(tempfile.gettempdir()) / f"autotune-spool-{os.getuid()}" / f"{study_name}-{key}",
        ]

    def write(self, number: int, payload: dict[str, Any], *, prefix: str = "trial") -> Path | None:
        """Keep a trial's results; the path, or None when no folder can take them."""
        text = json.dumps(payload)
        for folder in self.folders:
            path = folder / f"{prefix}-{number}.json"
            partial = path.with_suffix(".partial")
            try:
                folder.mkdir(parents=True, exist_ok=True)
                partial.write_text(text, encoding="utf-8")
                os.replace(partial, path)
                return path
            except OSError:
                with contextlib.suppress(OSError):
                    partial.unlink()
        return None

    def note_failure(self, trial: optuna.Trial, kind: str, reason: str) -> None:
        """Why `trial` ended, for the next run to record (the storage refused it now)."""
        started = trial.datetime_start
        note = {"number": trial.number, "kind": kind, "reason": reason}
        if started is not None:
            note["started"] = started.isoformat()
        self.write(trial.number, note, prefix=FAILED)

    def where(self, number: int) -> Path | None:
        for folder in self.folders:
            path = folder / f"trial-{number}.json"
            if path.is_file():
                return path
        return None

    def remove(self, number: int) -> None:
        for folder in self.folders:
            with contextlib.suppress(OSError):
                (folder / f"trial-{number}.json").unlink()

    def pending(self, prefix: str = "trial") -> list[Path]:
        """The spooled files (of measured trials; FAILED: the failure notes)."""
        return [
            path
            for folder in self.folders
            for path in (sorted(folder.glob(f"{prefix}-*.json")) if folder.is_dir() else [])
        ]


# The name of a failure note in the spool: failed-<number>.json.
FAILED = "failed"
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
    trial: optuna.Trial, values: list[float], user_attrs: dict[str, Any]
) -> dict[str, Any]:
    started = trial.datetime_start
    return {
        "number": trial.number,
        # Which trial of which study: another study later made at the same path under the same
        # name has its own trial with this number, started at another time.
        "started": started.isoformat() if started is not None else None,
        "values": values,
        "params": trial.params,
        "distributions": {k: distribution_to_json(d) for k, d in trial.distributions.items()},
        "user_attrs": user_attrs,
    }


def _same_trial(original: FrozenTrial | None, started: datetime | None) -> bool:
    """Whether a spooled payload belongs to `original`: a measured trial always exists in the
    storage (it is created before it is measured), and it started when the payload says (a
    payload from before that was recorded has no start, and is taken as it is)."""
    if original is None:
        return False
    if started is None or original.datetime_start is None:
        return True
    # Within a second: a storage may keep the instant at a coarser precision.
    return abs((original.datetime_start - started).total_seconds()) < 1


_Read = TypeVar("_Read")

# What Optuna raises on parameters and distributions it cannot take.
_BAD_TRIAL = (AttributeError, IndexError, KeyError, TypeError, ValueError)


def _spooled_trial(path: Path, *, objectives: int) -> tuple[SpooledTrial, FrozenTrial]:
    """The spooled trial at `path` and the completed trial to record; ValueError saying why
    when it holds no measurement of this study."""
    spooled = SpooledTrial.read(path.read_text(encoding="utf-8"))
    if path.name != f"trial-{spooled.number}.json":
        raise ValueError(f"number: {spooled.number} in the file of another trial")
    if len(spooled.values) != objectives:
        raise ValueError(f"values: {len(spooled.values)} for {objectives} objective(s)")
    attrs = dict(spooled.user_attrs)
    constraints = attrs.get("constraints") or {}
    try:
        return spooled, optuna.trial.create_trial(
            state=TrialState.COMPLETE,
            values=spooled.values,
            params=spooled.params,
            distributions={k: json_to_distribution(d) for k, d in spooled.distributions.items()},
            user_attrs={**attrs, "recovered_from_trial": spooled.number},
            system_attrs={f"constraints:{k}": float(v) for k, v in constraints.items()},
        )
    except _BAD_TRIAL as exc:
        raise ValueError(f"params: {type(exc).__name__}: {exc}") from None


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
        except OSError as exc:
            notes.append(f"cannot read the spool file {path}: {exc.strerror or exc}")
            continue
        yield path, found


def recover(study: optuna.Study, spool: Spool) -> list[str]:
    """Record the spooled results the storage never took, and the reasons of trials that
    failed when it refused them; one line for each, and for each file set aside."""
    notes = []
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    read = functools.partial(_spooled_trial, objectives=len(study.directions))
    # A trial's results can sit in both spool folders (kept beside the study, then again in
    # the temporary folder when that disk filled): recorded once, the other copy dropped.
    recorded_now: set[int] = set()
    for path, (spooled, frozen) in _read_each(spool.pending(), read, notes):
        number = spooled.number
        original: FrozenTrial | None = trials.get(number)
        if number in recorded_now or (
            original is not None and original.state == TrialState.COMPLETE
        ):
            path.unlink(missing_ok=True)  # recorded after all
            continue
        if not _same_trial(original, spooled.started):
            # Left by an earlier study of this name at this path (deleted since): not this
            # study's results.
            path.unlink(missing_ok=True)
            notes.append(
                f"discarded the spooled results of a trial {number} that is not this study's "
                "(an earlier study of the same name at the same path)"
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
        _fail(study._storage, trial, kind, reason)
        return True
    if trial.state == TrialState.FAIL and not failure_of(study, trial):
        record_failure(study, trial.number, kind, reason)
        return True
    return False


def _failure_note(path: Path) -> FailureNote:
    note: FailureNote = FailureNote.read(path.read_text(encoding="utf-8"))
    return note


def _recover_reasons(study: optuna.Study, spool: Spool) -> list[str]:
    """Record the failure notes of trials that ended while the storage refused writes."""
    notes = []
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    for path, note in _read_each(spool.pending(FAILED), _failure_note, notes):
        original = trials.get(note.number)
        # A trial still RUNNING is fail_orphaned's (or its live owner's) to end.
        failed = original is not None and original.state == TrialState.FAIL
        if (
            failed
            and _same_trial(original, note.started)
            and _record_reason(study, original, note.kind, note.reason)
        ):
            notes.append(f"trial {note.number} failed: {note.reason}")
        path.unlink(missing_ok=True)
    return notes
