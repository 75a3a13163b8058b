"""A database trial read row by row: one row Optuna cannot read fails that trial alone.

Optuna builds every trial of a study in one pass, so a single hand-edited row (a null value,
a distribution class it does not know, an attribute that is not JSON) makes every command
that reads the study fail with a traceback. Here a trial whose rows cannot be read becomes a
stand-in (autotune.records.readable) that names the row, and the others read as before.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from optuna.distributions import json_to_distribution
from optuna.trial import FrozenTrial

from autotune.errors import StudyError
from autotune.records.checks import objective_metrics
from autotune.records.readable import readable, stand_in
from autotune.records.shape import text_problem
from autotune.study.store.optuna_private import rdb_models as models
from autotune.study.store.optuna_private import rdb_session
from autotune.study.store.storage_urls import display_url

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
    for attr in model.study.user_attributes:
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
