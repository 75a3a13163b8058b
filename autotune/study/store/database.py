"""A study database whose every call waits out a lock, and whose trials are read one by one.

Another process holding SQLite's write lock past its busy timeout costs time, not a measured
trial: each call is retried with backoff, and one that still fails (the lock outlived the
retries, the disk is full) raises StorageUnavailable, which `autotune run` prints as one line,
keeping the trial's results in its spool (autotune.study.store.recovery).

The retries wrap, by delegation, the storage Optuna itself would use (what
optuna.storages.get_storage makes of an RDB storage: its cache over the database), as that
cache wraps its backend; so each call Optuna makes is retried as a whole, and no method of
Optuna's, public or private, is replaced.

Optuna builds every trial of a read in one pass, so a single hand-edited row (a null value,
a distribution class it does not know, an attribute that is not JSON or nested too deep) makes
every command that reads the study fail with a traceback. Here a trial whose rows cannot be
read becomes a stand-in (autotune.records.readable) that names the row, and the others read as
before: when Optuna's read fails, or a trial it read holds an attribute too deep, the rows are
read again here, one trial at a time.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import functools
import json
from collections.abc import Callable, Container
from typing import Any

import optuna
import tenacity
from optuna.distributions import json_to_distribution
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import StudyError
from autotune.records.checks import objective_metrics
from autotune.records.readable import readable, stand_in
from autotune.records.shape import text_problem, value_problem
from autotune.study.store.optuna_private import build_trial, heartbeat_storage, rdb_session
from autotune.study.store.optuna_private import rdb_models as models
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


# What Optuna raises on a row it cannot turn into a trial (its own checks are assertions; a
# RecursionError is JSON nested past Python's reader, which row_problem names).
ROW_ERRORS = (
    AssertionError,
    AttributeError,
    IndexError,
    KeyError,
    RecursionError,
    TypeError,
    ValueError,
)


def build_readable(
    build: Callable[[models.TrialModel], FrozenTrial], model: models.TrialModel
) -> FrozenTrial:
    """Optuna's `build` of the trial in `model`, or its stand-in."""
    if type(model.number) is not int or model.number < 0:
        # Trials are known by their numbers: without one, none can be named or ordered.
        raise StudyError(
            f"study '{model.study.study_name}': the trial stored with id {model.trial_id} has "
            f"no trial number ({model.number!r}); the database was edited or damaged"
        )
    objectives = len(model.study.directions)
    # Attributes too deep or too large are refused before Optuna's reader recurses into them.
    shape = _attribute_shape(model)
    try:
        if shape is not None:
            raise ValueError(shape)
        trial = build(model)
    except ROW_ERRORS as exc:
        return stand_in(
            number=model.number,
            trial_id=model.trial_id,
            state=model.state,
            why=row_problem(model, objectives) or f"its rows: {type(exc).__name__}: {exc}",
            started=model.datetime_start,
            completed=model.datetime_complete,
        )
    return readable(trial, objectives, _objective_metrics(model), trial_id=model.trial_id)


def _objective_metrics(model: models.TrialModel) -> list[str]:
    """The study's objective metrics, which its trials' values must agree with; [] when
    they cannot be read (the study's own reading says why)."""
    return _metrics_in(model.study.user_attributes)


def _metrics_in(attrs: Any) -> list[str]:
    for attr in attrs:
        if attr.key == "objective_metrics" and not _fails(json.loads, attr.value_json):
            return objective_metrics({attr.key: json.loads(attr.value_json)})
    return []


def _attribute_shape(model: models.TrialModel) -> str | None:
    """The first attribute whose stored JSON is too deep or too large to read."""
    for kind, attrs in (("user", model.user_attributes), ("system", model.system_attributes)):
        for attr in attrs:
            shape = text_problem(attr.value_json) if isinstance(attr.value_json, str) else None
            if shape is not None:
                return f"{attr.key} ({kind} attribute): {shape}"
    return None


def row_problem(model: models.TrialModel, objectives: int) -> str | None:
    """The first row of the trial Optuna cannot read, as 'field: what is wrong'."""
    shape = _attribute_shape(model)
    if shape is not None:
        return shape
    for value in model.values:
        if not 0 <= value.objective < objectives:
            return f"values: objective {value.objective} in a study of {objectives}"
        if _fails(models.TrialValueModel.stored_repr_to_value, value.value, value.value_type):
            return f"values: objective {value.objective} is null"
    for param in model.params:
        problem = _fails(_param_value, param.distribution_json, param.param_value)
        if problem:
            return f"params.{param.param_name}: {problem}"
    for kind, attrs in (("user", model.user_attributes), ("system", model.system_attributes)):
        for attr in attrs:
            if _fails(json.loads, attr.value_json):
                return f"{attr.key} ({kind} attribute): not JSON"
    return None


def _param_value(distribution_json: str, internal: float) -> Any:
    return json_to_distribution(distribution_json).to_external_repr(internal)


def _fails(read: Callable[..., Any], *args: Any) -> str | None:
    """What `read(*args)` raises, in words; None when it reads."""
    try:
        read(*args)
    except ROW_ERRORS as exc:
        return f"{exc}" if str(exc) else type(exc).__name__
    return None


def naming_the_attribute(method: Callable[..., Any]) -> Callable[..., Any]:
    """A storage's read of study attributes whose refusal names the attribute nested too
    deep or too large (the plain refusal says only that a row was damaged)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except StudyError:
            problem = study_attribute_problem(self)
            if problem is None:
                raise
            raise StudyError(
                f"cannot read the storage '{display_url(str(self.url))}': {problem}; the "
                "database was edited or damaged: repair or delete that attribute"
            ) from None

    return wrapper


def study_attribute_problem(storage: Any) -> str | None:
    """The first study attribute whose stored JSON is too deep or too large to read
    ("study 'S': key (study attribute): what is wrong"), or None."""
    with rdb_session(storage.scoped_session) as session:
        for attr in session.query(models.StudyUserAttributeModel):
            shape = text_problem(attr.value_json) if isinstance(attr.value_json, str) else None
            if shape is not None:
                return f"study '{attr.study.study_name}': {attr.key} (study attribute): {shape}"
    return None


def _parsed_problem(trial: FrozenTrial) -> str | None:
    """Whether a trial Optuna read holds an attribute nested past the limit (its row, read
    again, names it as build_readable does)."""
    for attrs in (trial.user_attrs, trial.system_attrs):
        for value in attrs.values() if isinstance(attrs, dict) else ():
            if value_problem(value) is not None:
                return "nested too deep"
    return None


class RowReader:
    """The trials of a database storage (`backend`, under Optuna's cache) as readers see them:
    each trial Optuna read, shown through `readable` once per stored version of it; when
    Optuna's read fails on a row, or a trial holds an attribute too deep, the rows are read
    again here, one trial at a time (the module's rule)."""

    def __init__(self, backend: optuna.storages.RDBStorage, cache: BaseStorage) -> None:
        self.backend = backend
        # The storage id of a study's trial by its number: Optuna's public question, which
        # its cache answers without the database for each trial it holds.
        self.stored_id = cache.get_trial_id_from_study_id_trial_number
        self.cache = cache
        self.study_ids: dict[int, int] = {}  # trial id -> study id, for each trial shown
        self.seen: dict[int, tuple[FrozenTrial, FrozenTrial]] = {}
        self.metrics: dict[int, list[str]] = {}

    def all_trials(self, read: Callable[[], list[FrozenTrial]], study_id: int) -> list[FrozenTrial]:
        """The study's trials: `read` (Optuna's), each shown; its rows, when `read` fails."""
        try:
            trials = read()
        except ROW_ERRORS:
            return self.from_rows(models.TrialModel.study_id == study_id)
        return [self.shown(trial, study_id) for trial in trials]

    def one_trial(self, read: Callable[[], FrozenTrial], trial_id: int) -> FrozenTrial:
        """The trial of `trial_id`: `read` (Optuna's), shown; its rows, when `read` fails."""
        try:
            trial = read()
        except ROW_ERRORS:  # a KeyError too: the rows' own read says whether there is one
            return self.from_rows(models.TrialModel.trial_id == trial_id)[0]
        seen = self.seen.get(trial_id)
        if seen is not None and seen[0] is trial:
            return seen[1]
        study_id = self.study_ids.get(trial_id)
        if study_id is None:
            with rdb_session(self.backend.scoped_session) as session:
                row = session.query(models.TrialModel.study_id).filter_by(trial_id=trial_id)
                study_id = row.scalar()
        return trial if study_id is None else self.shown(trial, study_id, trial_id)

    def shown(self, trial: FrozenTrial, study_id: int, key: int | None = None) -> FrozenTrial:
        """`trial` itself or its stand-in, worked out once per stored version of it (`key`:
        its storage id, when known)."""
        if type(trial.number) is not int or trial.number < 0:
            # Without a number no trial can be named: the rows' own read refuses the study.
            return self.from_rows(models.TrialModel.study_id == study_id)[0]
        key = key if key is not None else self.stored_id(study_id, trial.number)
        seen = self.seen.get(key)
        if seen is not None and seen[0] is trial:
            return seen[1]
        if _parsed_problem(trial) is not None:
            shown = self.from_rows(models.TrialModel.trial_id == key)[0]
        else:
            objectives = len(self.cache.get_study_directions(study_id))
            shown = readable(trial, objectives, self.objective_metrics(study_id), trial_id=key)
        self.seen[key] = (trial, shown)
        self.study_ids[key] = study_id
        return shown

    def objective_metrics(self, study_id: int) -> list[str]:
        """The study's objective metrics (kept once the study holds them); [] when they cannot
        be read (the study's own reading says why)."""
        if study_id not in self.metrics:
            try:
                metrics = objective_metrics(self.cache.get_study_user_attrs(study_id))
            except ROW_ERRORS:
                metrics = []
            if not metrics:
                return metrics
            self.metrics[study_id] = metrics
        return self.metrics[study_id]

    def from_rows(self, which: Any) -> list[FrozenTrial]:
        """The trials `which` selects, built one at a time from their rows."""
        build = functools.partial(build_trial, self.backend)
        with rdb_session(self.backend.scoped_session) as session:
            rows = (
                session.query(models.TrialModel)
                .filter(which)
                .order_by(models.TrialModel.trial_id)
                .all()
            )
            if not rows:
                raise KeyError("no trial of that id")
            trials = [build_readable(build, row) for row in rows]
        return sorted(trials, key=lambda t: t.number)


def kept(
    trials: list[FrozenTrial], states: Container[TrialState] | None, deepcopy: bool
) -> list[FrozenTrial]:
    """`trials` in `states` (all when None), copied with `deepcopy`, as Optuna returns them."""
    chosen = [t for t in trials if states is None or t.state in states]
    return copy.deepcopy(chosen) if deepcopy else chosen


@heartbeat_storage
class RetryingStorage(BaseStorage):
    """`backend` as Optuna would store into it (optuna.storages.get_storage), each call
    retried while the database is locked, then refused in one line, its trials read through
    a RowReader (the module's rules). `url`, `scoped_session`: the backend's, for messages
    and for naming a damaged row. Any other call Optuna makes on a storage (its heartbeat's
    check for stale trials) is passed on to the wrapped one, retried as a read."""

    def __init__(self, backend: optuna.storages.RDBStorage) -> None:
        self.inner = optuna.storages.get_storage(backend)
        self.url = str(backend.url)
        self.scoped_session = backend.scoped_session
        self.rows = RowReader(backend, self.inner)

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "url", "scoped_session", "rows") or name.startswith("__"):
            raise AttributeError(name)  # not set yet (a copy being made)
        found = getattr(self.inner, name)
        if not callable(found):
            return found
        return functools.partial(_retrying(_passed_on(name), "read"), self)


def _passed_on(name: str) -> Callable[..., Any]:
    def method(self: RetryingStorage, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


def _get_all_trials(
    self: RetryingStorage,
    study_id: int,
    deepcopy: bool = True,
    states: Container[TrialState] | None = None,
) -> list[FrozenTrial]:
    read = functools.partial(self.inner.get_all_trials, study_id, deepcopy=False)
    return kept(self.rows.all_trials(read, study_id), states, deepcopy)


def _get_trial(self: RetryingStorage, trial_id: int) -> FrozenTrial:
    return self.rows.one_trial(functools.partial(self.inner.get_trial, trial_id), trial_id)


def _get_best_trial(self: RetryingStorage, study_id: int) -> FrozenTrial:
    return self.rows.shown(self.inner.get_best_trial(study_id), study_id)


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
)
# Read through the RowReader rather than passed on as they are.
READ_ROW_BY_ROW = {
    "get_trial": _get_trial,
    "get_all_trials": _get_all_trials,
    "get_best_trial": _get_best_trial,
}
# Passed on as they are: a study's deletion (the dashboard's, never autotune's), settings and
# the end of a session.
PLAIN = (
    "delete_study",
    "get_heartbeat_interval",
    "get_heartbeat_stale_trial_callback",
    "remove_session",
)
for _name in WRITES:
    setattr(RetryingStorage, _name, _retrying(_passed_on(_name), "write to"))
for _name in READS:
    setattr(
        RetryingStorage, _name, _retrying(READ_ROW_BY_ROW.get(_name, _passed_on(_name)), "read")
    )
for _name in ("get_study_user_attrs", "get_all_studies"):
    setattr(RetryingStorage, _name, naming_the_attribute(getattr(RetryingStorage, _name)))
for _name in PLAIN:
    setattr(RetryingStorage, _name, _passed_on(_name))
RetryingStorage.record_heartbeat = _best_effort(  # type: ignore[attr-defined]
    _retrying(_passed_on("record_heartbeat"), "write to")
)
abc.update_abstractmethods(RetryingStorage)
