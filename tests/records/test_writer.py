"""Issue 55: the one writer takes typed parts (`TrialRecord.part`, `StudyRecord.part`) and
stores each field as its record reads it back; a bad value fails at the writer, by field."""

from __future__ import annotations

import optuna
import pytest

from autotune.errors import StudyError
from autotune.records.parts import Paired, RaceCheck
from autotune.records.stored import StudyRecord, TrialRecord
from autotune.records.writer import end_trial, write_study, write_trial

CONFIG = {"backend": "transformers", "batch_size": 4}


def _trial() -> optuna.Trial:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.create_study().ask()


def test_a_part_is_stored_field_by_field_in_the_order_given_its_parts_as_mappings() -> None:
    trial = _trial()
    check = RaceCheck(incumbent=1, kept=False, tokens_per_s=41.0)
    paired = Paired.of({"accuracy_diff": -0.01, "n_items": 32})
    write_trial(trial, TrialRecord.part(config=CONFIG, throughput_tok_s=12.5, race_check=check))
    write_trial(trial, TrialRecord.part(paired_vs_reference=paired))
    assert list(trial.user_attrs) == [
        "config",
        "throughput_tok_s",
        "race_check",
        "paired_vs_reference",
    ]
    assert trial.user_attrs["race_check"] == {"incumbent": 1, "kept": False, "tokens_per_s": 41.0}
    assert trial.user_attrs["paired_vs_reference"] == {"accuracy_diff": -0.01, "n_items": 32}
    record = TrialRecord.from_attrs(trial.user_attrs, number=0)
    assert record.race_check == check and record.figure("throughput_tok_s") == 12.5


def test_joined_parts_keep_the_first_position_and_the_last_value() -> None:
    first = TrialRecord.part(config=CONFIG, answers_computed=3, time_s={"total": 1.0})
    joined = first.joined(TrialRecord.part(answers_computed=0, duplicate_of=2))
    assert joined.written() == {
        "config": CONFIG,
        "answers_computed": 0,
        "time_s": {"total": 1.0},
        "duplicate_of": 2,
    }
    assert joined.untimed().written().keys() == {"config", "answers_computed", "duplicate_of"}
    assert joined.duplicate_of == 2  # a part reads typed, as the whole record does


def test_a_bad_value_fails_at_the_writer_by_field_and_nothing_is_stored() -> None:
    trial = _trial()
    with pytest.raises(StudyError, match="trial 0 would store an unreadable record: accuracy"):
        write_trial(trial, TrialRecord.part(accuracy=float("nan")))
    with pytest.raises(StudyError, match="is_reference"):
        end_trial(trial, TrialRecord.part(config=CONFIG, is_reference="yes"))
    assert trial.user_attrs == {}


def test_a_study_part_is_checked_as_a_study_record() -> None:
    study = optuna.create_study(study_name="s")
    write_study(study, StudyRecord.part(floor_warning="too few items", dummy_weights=True))
    assert study.user_attrs == {"floor_warning": "too few items", "dummy_weights": True}
    with pytest.raises(StudyError, match="study 's' would store an unreadable record: notes"):
        write_study(study, StudyRecord.part(notes="not a list"))
