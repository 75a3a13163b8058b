"""A resume checks what its comparisons rest on (autotune.study.start.opening): the evaluation set
(name, items, images), the reference, the accuracy floor and the searched parameters.

The study is created by the code `autotune run` creates it with; each resume is the real
command line, which must refuse in one line naming what changed, exit non-zero and write
nothing.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from small_space import autotune_cli, small_evalset, small_space

from autotune.accuracy.confirm import HOLDOUT, Holdout
from autotune.errors import StudyError
from autotune.evalset.dataset import load_evalset
from autotune.space import load_space
from autotune.study.plan import StudyPlan, plan_study, study_attrs
from autotune.study.start.opening import (
    COMPARISON_BASIS,
    comparison_basis,
    keep_holdout,
    open_study,
)

PARAMS = {"batch_size": {"choices": [1, 2]}, "image_max_side": {"choices": [None, 128]}}


def make_plan(space: Path, db: Path, evalset: Path | None = None) -> StudyPlan:
    """The plan of `autotune run` into `db`: a SQLite file, or an Optuna journal (.journal)."""
    return plan_study(
        load_space(str(space)),
        study_name="r",
        storage_url=str(db) if db.suffix == ".journal" else f"sqlite:///{db}",
        evalset=str(evalset) if evalset else None,
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def edit_space(space: Path, change: dict[str, Any]) -> None:
    data = yaml.safe_load(space.read_text(encoding="utf-8"))
    space.write_text(yaml.safe_dump(merged(data, change), sort_keys=False), encoding="utf-8")


def merged(data: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """`data` with `change` written over it, mapping by mapping (a changed max_drop keeps the
    floor's other settings)."""
    out = dict(data)
    for key, value in change.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both else value
    return out


def drop_first_item(evalset: Path) -> None:
    items = evalset / "items.jsonl"
    lines = items.read_text(encoding="utf-8").splitlines(keepends=True)
    items.write_text("".join(lines[1:]), encoding="utf-8")


def repaint_first_image(evalset: Path) -> None:
    first = sorted((evalset / "images").iterdir())[0]
    shutil.copy(sorted((evalset / "images").iterdir())[-1], first)


# (what is changed, how, the words the refusal must say)
CHANGES = [
    ("evalset-name", None, "another evaluation set (evalset -> other)"),
    ("items", drop_first_item, "its items"),
    ("images", repaint_first_image, "its images changed"),
    ("reference", {"reference": {"batch_size": 2}}, "another reference (batch_size"),
    ("max_drop", {"constraints": {"accuracy": {"max_drop": 0.2}}}, "max_drop (default) -> 0.2"),
    ("test", {"constraints": {"accuracy": {"test": "point"}}}, 'test (default) -> "point"'),
    ("floor-mode", {"constraints": {"accuracy": {"mode": "absolute", "min": 0.5}}}, "floor"),
    ("choices", {"params": {**PARAMS, "batch_size": {"choices": [1, 2, 4]}}}, "batch_size"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "change", "words"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_resume_with_a_changed_basis_is_refused_by_name(
    tmp_path: Path, name: str, change: Any, words: str
) -> None:
    space = small_space(tmp_path, name="r", params=PARAMS)
    evalset = small_evalset(tmp_path)
    db = tmp_path / "r.db"
    study, _ = open_study(make_plan(space, db, evalset))
    before = (digest(db), dict(study.user_attrs))
    extra: list[str] = ["--evalset", str(evalset)]
    if name == "evalset-name":
        extra = ["--evalset", str(shutil.copytree(evalset, tmp_path / "other"))]
    elif callable(change):
        change(evalset)
    else:
        edit_space(space, change)
    ran = autotune_cli(
        "run", "--space", str(space), "--study", "r", "--storage", f"sqlite:///{db}", *extra,
        cwd=tmp_path,
    )  # fmt: skip
    lines = ran.stderr.strip().splitlines()
    assert ran.returncode != 0 and len(lines) == 1, ran.stderr
    assert words in lines[0] and "--study NEW_NAME" in lines[0], lines[0]
    assert lines[0].startswith("error: study 'r' was made with "), lines[0]
    assert digest(db) == before[0]  # nothing written
    reread = optuna.load_study(study_name="r", storage=f"sqlite:///{db}")
    assert reread.user_attrs == before[1] and not reread.trials


def test_the_same_run_resumes_and_a_study_without_a_stored_basis_records_it(
    tmp_path: Path,
) -> None:
    space = small_space(tmp_path, name="r", params=PARAMS)
    plan = make_plan(space, tmp_path / "r.db")
    study, _ = open_study(plan)
    assert study.user_attrs[COMPARISON_BASIS] == comparison_basis(plan)
    open_study(plan)  # the same command again
    # A study stored before the basis was: resumed as before, the basis recorded then.
    old = optuna.create_study(study_name="r", storage=f"sqlite:///{tmp_path}/old.db")
    for key, value in study_attrs(plan).written().items():
        old.set_user_attr(key, value)
    resumed, _ = open_study(make_plan(space, tmp_path / "old.db"))
    assert resumed.user_attrs[COMPARISON_BASIS] == comparison_basis(plan)


def test_a_run_that_opens_a_study_another_run_is_creating_waits_for_its_basis(
    tmp_path: Path,
) -> None:
    """Two runs on one new study with other choices for a parameter: the one that did not
    create it waits for the creator's basis and is refused, instead of taking the half-made
    study for its own."""
    db = tmp_path / "r.db"
    creator = make_plan(small_space(tmp_path, name="r", params=PARAMS), db)
    (tmp_path / "other").mkdir()
    wider = {**PARAMS, "batch_size": {"choices": [1, 2, 4]}}
    other = make_plan(small_space(tmp_path / "other", name="r", params=wider), db)
    half_made = optuna.create_study(study_name="r", storage=f"sqlite:///{db}")

    def store_basis() -> None:
        time.sleep(1.0)
        half_made.set_user_attr(COMPARISON_BASIS, comparison_basis(creator))

    writer = threading.Thread(target=store_basis)
    writer.start()
    try:
        with pytest.raises(StudyError, match=r"other searched parameters \(batch_size"):
            open_study(other)
    finally:
        writer.join()


def test_a_refused_resume_writes_nothing_to_a_journal_either(tmp_path: Path) -> None:
    """Creating a study that exists appends a refused record to an Optuna journal: a resume
    looks the study up instead, and a refused one leaves the file as it was."""
    space = small_space(tmp_path, name="r", params=PARAMS)
    journal = tmp_path / "r.journal"
    open_study(make_plan(space, journal))
    before = digest(journal)
    open_study(make_plan(space, journal))  # the same command again: nothing to write either
    assert digest(journal) == before
    edit_space(space, {"constraints": {"accuracy": {"max_drop": 0.2}}})
    with pytest.raises(StudyError, match=r"another accuracy floor \(max_drop \(default\) -> 0.2"):
        open_study(make_plan(space, journal))
    assert digest(journal) == before


def test_a_resume_holds_out_what_the_first_run_did(tmp_path: Path) -> None:
    space = load_space(str(small_space(tmp_path, evalset="smoke")))
    evalset = load_evalset("smoke")
    study = optuna.create_study()
    keep_holdout(study, space, evalset)
    first = study.user_attrs[HOLDOUT]
    assert first == Holdout.of(evalset.decision_order(), 99).describe()
    # A later run whose own sizing would differ (another version's simulation, say).
    study.set_user_attr(HOLDOUT, {**first, "items": 64})
    again = load_space(str(small_space(tmp_path, evalset="smoke")))
    keep_holdout(study, again, evalset)
    assert again.constraints.accuracy.confirmation.items == 64
    # A study begun before confirmations existed goes on without one.
    old = optuna.create_study()
    old.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, values=[1.0]))
    before = load_space(str(small_space(tmp_path, evalset="smoke")))
    keep_holdout(old, before, evalset)
    assert before.constraints.accuracy.confirmation.enabled is False
    assert old.user_attrs[HOLDOUT]["items"] == 0
