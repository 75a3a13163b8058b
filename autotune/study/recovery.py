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
import hashlib
import json
import os
import socket
import tempfile
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.distributions import distribution_to_json, json_to_distribution
from optuna.trial import FrozenTrial, TrialState

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
        if not record or not _owner_gone(record):
            continue
        known = (why or {}).get(int(record["pid"]))
        reason = f"its process (pid {record['pid']} on {record['host']}) is gone: " + (
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
    """Measured trials not yet known to be recorded, one JSON file per trial."""

    def __init__(self, storage_url: str, study_name: str) -> None:
        stored = local_file(storage_url)
        beside = stored.parent if stored is not None else STUDIES_DIR
        key = hashlib.sha256(f"{storage_url}\0{study_name}".encode()).hexdigest()[:12]
        self.folders = [
            beside / f"{study_name}-spool",
            Path(tempfile.gettempdir()) / f"autotune-spool-{os.getuid()}" / f"{study_name}-{key}",
        ]

    def write(self, number: int, payload: dict[str, Any]) -> Path | None:
        """Keep a trial's results; the path, or None when no folder can take them."""
        text = json.dumps(payload)
        for folder in self.folders:
            path = folder / f"trial-{number}.json"
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

    def pending(self) -> list[dict[str, Any]]:
        payloads = []
        for folder in self.folders:
            for path in sorted(folder.glob("trial-*.json")) if folder.is_dir() else []:
                with contextlib.suppress(OSError, ValueError):
                    payloads.append(json.loads(path.read_text(encoding="utf-8")))
        return payloads


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


def _same_trial(original: FrozenTrial | None, started: str | None) -> bool:
    """Whether a spooled payload belongs to `original`: a measured trial always exists in the
    storage (it is created before it is measured), and it started when the payload says (a
    payload from before that was recorded has no start, and is taken as it is)."""
    if original is None:
        return False
    if started is None or original.datetime_start is None:
        return True
    # Within a second: a storage may keep the instant at a coarser precision.
    return abs((original.datetime_start - datetime.fromisoformat(started)).total_seconds()) < 1


def recover(study: optuna.Study, spool: Spool) -> list[str]:
    """Record the spooled results the storage never took; one line for each."""
    notes = []
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    for payload in spool.pending():
        number = int(payload["number"])
        original: FrozenTrial | None = trials.get(number)
        if original is not None and original.state == TrialState.COMPLETE:
            spool.remove(number)  # recorded after all
            continue
        if not _same_trial(original, payload.get("started")):
            # Left by an earlier study of this name at this path (deleted since): not this
            # study's results.
            spool.remove(number)
            notes.append(
                f"discarded the spooled results of a trial {number} that is not this study's "
                "(an earlier study of the same name at the same path)"
            )
            continue
        attrs = dict(payload["user_attrs"])
        constraints = attrs.get("constraints") or {}
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE,
                values=payload["values"],
                params=payload["params"],
                distributions={
                    k: json_to_distribution(d) for k, d in payload["distributions"].items()
                },
                user_attrs={**attrs, "recovered_from_trial": number},
                system_attrs={f"constraints:{k}": float(v) for k, v in constraints.items()},
            )
        )
        recovered = max(t.number for t in study.get_trials(deepcopy=False))
        if original is not None and original.state == TrialState.RUNNING:
            reason = f"its results could not be stored then; recorded as trial {recovered}"
            _fail(study._storage, original, "recovered", reason)
        spool.remove(number)
        notes.append(
            f"recorded the results of trial {number}, which the storage could not take then, "
            f"as trial {recovered}"
        )
    return notes
