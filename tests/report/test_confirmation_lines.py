"""What `best` and the report say of the recommendation's own error: with dummy weights, that
none is judged, never a floor verdict's error that does not exist."""

from __future__ import annotations

from pathlib import Path

import optuna
from study_factory import build_study

from autotune.report.confirmation import DUMMY_LINE, confirmation_lines
from autotune.report.data import collect
from autotune.report.recommended import recommended_section
from autotune.report.text import best_text
from autotune.study.results.select import recommend


def _study(tmp_path: Path, *, dummy_weights: bool) -> optuna.Study:
    storage, name = build_study(tmp_path, dummy_weights=dummy_weights)
    return optuna.load_study(study_name=name, storage=storage)


def test_dummy_weights_say_the_error_is_not_judged(tmp_path: Path) -> None:
    study = _study(tmp_path, dummy_weights=True)
    rec = recommend(study)
    assert rec.feasible
    assert confirmation_lines(rec, dummy_weights=True) == [DUMMY_LINE]
    assert "not judged" in DUMMY_LINE and "timed" in DUMMY_LINE
    text = best_text(study)
    assert DUMMY_LINE in text
    assert "each floor verdict has its error" not in text
    section = recommended_section(collect(study))
    assert "dummy weights: the accuracy pass was timed" in section
    assert "each floor verdict has its error" not in section


def test_real_weights_without_a_holdout_still_say_so(tmp_path: Path) -> None:
    study = _study(tmp_path, dummy_weights=False)
    rec = recommend(study)
    lines = confirmation_lines(rec)
    assert lines and lines[0].startswith("accuracy: no items held out")
    assert DUMMY_LINE not in best_text(study)
