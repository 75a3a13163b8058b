"""A study database whose every call waits out a lock, then fails in one line.

Another process holding SQLite's write lock past its busy timeout costs time, not a measured
trial: each call is retried with backoff, and one that still fails (the lock outlived the
retries, the disk is full) raises StorageUnavailable, which `autotune run` prints as one line,
keeping the trial's results in its spool (autotune.study.store.recovery).

The retries wrap, by delegation, the storage Optuna itself would use (what
optuna.storages.get_storage makes of an RDB storage: its cache over the database), as that
cache wraps its backend; so each call Optuna makes is retried as a whole, and no method of
Optuna's, public or private, is replaced.
"""

from __future__ import annotations

import abc
import contextlib
import functools
from collections.abc import Callable
from typing import Any

import optuna
import tenacity

from autotune.errors import StudyError
from autotune.study.store.optuna_private import HeartbeatStorage, stale_trial_ids
from autotune.study.store.rdb_rows import ROW_ERRORS, naming_the_attribute
from autotune.study.store.storage_urls import display_url, is_busy, secrets_in

# Retries (with backoff) after SQLite's own busy timeout, before the storage is reported
# unavailable.
WRITE_RETRIES = 6


class StorageUnavailable(StudyError):
    """A write to the study's storage still failed after its retries (locked, disk full)."""


def masked(message: str, url: str) -> str:
    """`message` without the passwords of `url`, wherever a driver quoted them."""
    message = message.replace(url, display_url(url))
    for secret in secrets_in(url):
        message = message.replace(secret, "***")
    return message


def headline(exc: BaseException) -> str:
    """The first line of what `exc` says (a driver's message can run to a dozen lines)."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _database_error(exc: BaseException) -> BaseException | None:
    """The database's own refusal behind `exc` (Optuna wraps it in StorageInternalError):
    locked, disk full, I/O. An IntegrityError is Optuna's business (a duplicate study)."""
    from sqlalchemy.exc import OperationalError

    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 5:
        if isinstance(current, OperationalError):
            return current
        current, seen = current.__cause__ or current.__context__, seen + 1
    return None


def _busy(exc: BaseException) -> bool:
    refusal = _database_error(exc)
    return refusal is not None and is_busy(refusal)


# A locked database is waited out: exponential backoff from 0.5 s to 10 s, with jitter so two
# hosts that collided do not collide again in step.
LOCKED_RETRY = tenacity.Retrying(
    retry=tenacity.retry_if_exception(_busy),
    stop=tenacity.stop_after_attempt(WRITE_RETRIES + 1),
    wait=tenacity.wait_exponential(multiplier=0.5, max=10) + tenacity.wait_random(0, 0.5),
    reraise=True,
)


def _damaged_row(exc: BaseException) -> bool:
    """Whether a read failed on what a row holds (a state name the enum lacks, a date that is
    no date) rather than on Optuna's "not found" (a KeyError, its answer to a wrong name)."""
    return isinstance(exc, (*ROW_ERRORS, LookupError)) and not isinstance(exc, KeyError)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _retrying(method: Callable[..., Any], action: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: RetryingStorage, *args: Any, **kwargs: Any) -> Any:
        try:
            # A copy per call: another thread's call (the heartbeat's) must not share its
            # attempt count and state.
            return LOCKED_RETRY.copy()(method, self, *args, **kwargs)
        except Exception as exc:
            refusal = _database_error(exc)
            if refusal is None and action == "read" and _damaged_row(exc):
                raise StudyError(
                    f"cannot read the study's storage '{display_url(self.url)}': a row "
                    f"was edited or damaged ({headline(exc)})"
                ) from None
            if refusal is None:
                raise  # Optuna's own errors (DuplicatedStudyError, ...) stay as they are
            why = masked(_first_line(refusal), self.url)
            raise StorageUnavailable(f"cannot {action} the study's storage: {why}") from exc

    return wrapper


def _best_effort(method: Callable[..., Any]) -> Callable[..., Any]:
    """A heartbeat written from Optuna's background thread: a refused one is skipped, since an
    exception there is only a traceback on stderr. The trial's own next write, in the main
    thread, reports the storage in one line; a later beat tries again."""

    @functools.wraps(method)
    def wrapper(self: RetryingStorage, *args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(StorageUnavailable):
            return method(self, *args, **kwargs)
        return None

    return wrapper


class RetryingStorage(HeartbeatStorage):
    """`backend` as Optuna would store into it (optuna.storages.get_storage), each call
    retried while the database is locked, then refused in one line (the module's rule).
    `url`, `scoped_session`: the backend's, for messages and for naming a damaged row."""

    def __init__(self, backend: optuna.storages.RDBStorage) -> None:
        self.inner = optuna.storages.get_storage(backend)
        self.url = str(backend.url)
        self.scoped_session = backend.scoped_session


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: RetryingStorage, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


def _stale_trials(self: RetryingStorage, study_id: int) -> list[int]:
    return stale_trial_ids(self.inner, study_id)


# Every storage method that writes: a refused write is one StorageUnavailable line.
WRITES = (
    "create_new_study",
    "set_study_user_attr",
    "set_study_system_attr",
    "create_new_trial",
    "set_trial_param",
    "set_trial_state_values",
    "set_trial_intermediate_value",
    "set_trial_user_attr",
    "set_trial_system_attr",
)
# Every storage method that reads: a reader waits on a writer's exclusive lock as well (SQLite).
READS = (
    "get_study_id_from_name",
    "get_study_name_from_id",
    "get_study_directions",
    "get_study_user_attrs",
    "get_study_system_attrs",
    "get_all_studies",
    "get_trial_id_from_study_id_trial_number",
    "get_trial",
    "get_all_trials",
    "get_best_trial",
    "get_trial_param",
    "get_trial_user_attrs",
    "get_trial_system_attrs",
)
# Passed on as they are: a study's deletion (the dashboard's, never autotune's), settings and
# the end of a session.
PLAIN = (
    "delete_study",
    "get_heartbeat_interval",
    "get_heartbeat_stale_trial_callback",
    "remove_session",
)
for _name in WRITES:
    setattr(RetryingStorage, _name, _retrying(_delegate(_name), "write to"))
for _name in READS:
    setattr(RetryingStorage, _name, _retrying(_delegate(_name), "read"))
for _name in ("get_study_user_attrs", "get_all_studies"):
    setattr(RetryingStorage, _name, naming_the_attribute(getattr(RetryingStorage, _name)))
for _name in PLAIN:
    setattr(RetryingStorage, _name, _delegate(_name))
RetryingStorage.stale_trials = _retrying(_stale_trials, "read")  # type: ignore[method-assign]
RetryingStorage.record_heartbeat = _best_effort(  # type: ignore[method-assign]
    _retrying(_delegate("record_heartbeat"), "write to")
)
abc.update_abstractmethods(RetryingStorage)
