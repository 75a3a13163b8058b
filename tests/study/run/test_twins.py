"""Repeats, reused answers and the reference of a shared study: a trial waits for a reference
that another process runs, and finds it however the two reads of the study fall around its
completion; a second study on the same model and set reuses the first one's answers through
the answers cache, and refuses an entry edited by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState
from small_space import LOOP_WORKLOAD, run_study, small_evalset, small_space

from autotune.errors import TrialFailure
from autotune.evalset.dataset import load_evalset
from autotune.records.reference import study_extensions
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


def _by_role(study: optuna.Study) -> tuple[FrozenTrial, FrozenTrial]:
    reference, candidate = study.get_trials(states=(TrialState.COMPLETE,))
    assert reference.user_attrs.get("is_reference") and candidate.user_attrs.get("candidate")
    return reference, candidate


@pytest.mark.slow  # three whole studies on the bundled model, in one folder
def test_a_second_study_on_the_same_model_and_set_answers_nothing_again(tmp_path: Path) -> None:
    candidate = {"name": "side-256", "config": {"image_max_side": 256}}
    space = small_space(tmp_path, trials=2, candidates=[candidate], sampler={"steps": False})
    items = len(load_evalset(str(tmp_path / "evalset")).items)
    first, one = run_study(space, study="one", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    reference, named = _by_role(one)
    assert reference.user_attrs["answers_computed"] == items
    assert "accuracy_reused_from" not in reference.user_attrs
    assert named.user_attrs["answers_computed"] > 0

    # Same model, set and configurations, another study: every answer comes from the cache.
    second, two = run_study(space, study="two", cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    again, named_again = _by_role(two)
    assert again.user_attrs["answers_computed"] == 0
    entry = again.user_attrs["accuracy_reused_from"]
    assert entry.startswith("cache:") and (tmp_path / "answers" / f"{entry[6:]}.json").is_file()
    assert again.user_attrs["predictions"] == reference.user_attrs["predictions"]
    line = f"reference: {items} of {items} items answered (stage 1; {items} from the answers cache)"
    assert line in second.stderr
    # The candidate's output key matches its own entry (not the reference's): reused, and
    # judged as the first study judged it.
    assert named_again.user_attrs["answers_computed"] == 0
    assert named_again.user_attrs["accuracy_reused_from"] not in (entry, None)
    assert named_again.user_attrs["item_scores"] == named.user_attrs["item_scores"]
    assert named_again.user_attrs["paired_vs_reference"] == named.user_attrs["paired_vs_reference"]

    # An entry edited by hand is refused by name, answered again and written whole again.
    path = tmp_path / "answers" / f"{entry[6:]}.json"
    stored = json.loads(path.read_text(encoding="utf-8"))
    edited = next(iter(stored["answers"]))
    stored["answers"][edited] = "forged"
    path.write_text(json.dumps(stored), encoding="utf-8")
    third, three = run_study(space, study="three", cwd=tmp_path)
    assert third.returncode == 0, third.stderr[-2000:]
    assert f"answers cache: refused {path}: its checksum does not match" in third.stderr
    recomputed, _ = _by_role(three)
    assert recomputed.user_attrs["answers_computed"] == items
    assert "accuracy_reused_from" not in recomputed.user_attrs
    assert recomputed.user_attrs["predictions"] == reference.user_attrs["predictions"]
    rewritten = json.loads(path.read_text(encoding="utf-8"))
    assert rewritten["answers"] == reference.user_attrs["predictions"]


@pytest.mark.slow  # a whole study on the bundled model
def test_a_candidate_undecided_where_the_reference_stopped_has_the_reference_answer_on(
    tmp_path: Path,
) -> None:
    evalset = small_evalset(tmp_path / "pool", n_text=60, n_shapes=12)
    # On the bundled model side 128 reads most codes the reference reads, not all: its
    # floor (loose here, so the reference's first stage is small) cannot decide on the
    # reference's first stage alone.
    candidate = {"name": "side-128", "config": {"image_max_side": 128}}
    space = small_space(
        tmp_path,
        trials=2,
        evalset=str(evalset),
        candidates=[candidate],
        sampler={"steps": False},
        workload={**LOOP_WORKLOAD, "accuracy_batch_size": 4},
        constraints={
            "accuracy": {"mode": "relative", "max_drop": 0.2, "confirmation": {"enabled": False}}
        },
    )
    result, study = run_study(space, study="s", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    reference, named = _by_role(study)
    up_front = reference.user_attrs["answers_computed"]
    assert f"reference: {up_front} of 72 items answered (stage 1)" in result.stderr
    extensions, problems = study_extensions(study)
    assert problems == [] and extensions and {e.for_trial for e in extensions} == {named.number}
    answered = extensions[-1].answered_items
    assert up_front < answered <= 72
    assert f"reference: {answered} of 72 items answered (stage {len(extensions) + 1}: " in (
        result.stderr
    )
    # Its floor looked past the reference's first stage, on items both answered, and
    # decided there (or ran out of items); its answers were its own.
    paired = named.user_attrs["paired_vs_reference"]
    assert up_front < paired["n_items"] <= answered
    assert named.user_attrs["answers_computed"] == len(named.user_attrs["predictions"])
    assert set(named.user_attrs["predictions"]) <= set(reference.user_attrs["predictions"]) | {
        i for e in extensions for i in e.predictions
    }
