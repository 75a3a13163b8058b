"""Repeats and the reference of a shared study: a trial waits for a reference that another
process runs, and finds it however the two reads of the study fall around its completion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from small_space import small_space

from autotune.errors import TrialFailure
from autotune.space import load_space
from autotune.study.run.twins import await_reference


class _CompletesOnRunningRead:
    """The study as another process's reference finishes: the reference completes just as
    this process asks which trials are running (the moment CI's Postgres run hit)."""

    def __init__(self, study: optuna.Study, reference: optuna.Trial) -> None:
        self._study = study
        self._reference: optuna.Trial | None = reference

    def get_trials(self, *args: Any, **kwargs: Any) -> list[optuna.trial.FrozenTrial]:
        if self._reference is not None and kwargs.get("states") == (TrialState.RUNNING,):
            self._study.tell(self._reference, 1.0)
            self._reference = None
        return self._study.get_trials(*args, **kwargs)


def _running_reference(study: optuna.Study) -> optuna.Trial:
    reference = study.ask()
    reference.set_user_attr("is_reference", True)
    return reference


def test_a_reference_completing_between_the_reads_is_found(tmp_path: Path) -> None:
    space = load_space(str(small_space(tmp_path)))
    assert space.constraints.accuracy.enabled and space.constraints.accuracy.mode == "relative"
    study = optuna.create_study()
    reference = _running_reference(study)
    found = await_reference(_CompletesOnRunningRead(study, reference), space)  # type: ignore[arg-type]
    assert found is not None and found.number == reference.number
    assert found.state == TrialState.COMPLETE


def test_a_failed_reference_fails_the_trial_in_one_line(tmp_path: Path) -> None:
    space = load_space(str(small_space(tmp_path)))
    study = optuna.create_study()
    study.tell(_running_reference(study), state=TrialState.FAIL)
    with pytest.raises(TrialFailure, match="no completed reference trial") as failure:
        await_reference(study, space)
    assert failure.value.kind == "no-reference"
