"""Issue 41: a trial's parts read typed (autotune.records.parts), as tolerantly as the plain
mappings they were: a key of the wrong kind reads as unknown, a key of another autotune is left
aside (kept in the environment), what shows the record as written shows it so, and what is no
mapping fails in the words it always failed in."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from autotune.accuracy.paired import PairedComparison
from autotune.accuracy.sequential import FloorLook
from autotune.records.parts import (
    Confirmed,
    Environment,
    Failure,
    FloorVerdict,
    Owner,
    Paired,
    RaceCheck,
    Stepped,
    TimeSplit,
    with_entries,
)
from autotune.records.stored import MEASURED_BESIDE, STARTUP_BESIDE, TrialRecord
from autotune.report.text import trial_summary
from autotune.study.proposals.steering import Step
from autotune.study.results.provenance import source_words
from autotune.study.results.timeshare import ENGINE_PHASES, PARTS, WAITS, time_share
from autotune.study.store.recovery import owner

CONFIG = {"backend": "transformers", "batch_size": 4}


def record(**parts: Any) -> TrialRecord:
    return TrialRecord.from_attrs({"config": CONFIG, **parts}, number=3)


def frozen(attrs: dict[str, Any]) -> FrozenTrial:
    return create_trial(
        state=TrialState.COMPLETE,
        values=[1.0],
        params={"batch_size": 4},
        distributions={"batch_size": CategoricalDistribution([1, 4])},
        user_attrs={"config": CONFIG, **attrs},
    )


def test_each_part_names_what_its_writer_writes() -> None:
    """The read side's fields are the write side's keys, so neither drifts alone."""
    assert set(Paired.model_fields) == {f.name for f in dataclasses.fields(PairedComparison)}
    assert set(FloorVerdict.model_fields) == {f.name for f in dataclasses.fields(FloorLook)}
    step = Step({}, "batch_size", 8, 0, new_launch=False, also=("dtype",))
    assert set(Stepped.model_fields) == set(step.describe().written())
    assert set(Owner.model_fields) == set(owner(worker=1).written())
    assert "worker" not in owner().written()  # a run of one worker stores as before
    timed = (set(PARTS) - {"waiting", "hand_off", "failed"}) | set(WAITS) | set(ENGINE_PHASES)
    assert set(TimeSplit.model_fields) == timed | {"engine_call", "total"}
    assert {STARTUP_BESIDE, MEASURED_BESIDE} <= set(Environment.model_fields)


def test_parts_read_typed() -> None:
    read = record(
        environment={"runner": "server", "server_format": "vllm", "vllm": "0.11"},
        time_s={"startup": 3, "total": 20.5},
        paired_vs_reference={"n_items": 150, "ci_low": -0.03, "test": "sequential"},
        accuracy_floor={"decision": "feasible", "ci_low": 0.7},
        step={"lever": "batch_size", "value": 8, "from_trial": 0, "also": ["dtype"]},
        owner={"host": "h", "pid": 12, "started": 5.5},
    )
    assert read.environment.runner == "server" and read.environment.model_extra == {"vllm": "0.11"}
    assert read.environment.engine_name("vllm") == "the vllm server"
    assert read.time_s is not None and (read.time_s.startup, read.time_s.total) == (3.0, 20.5)
    assert read.times.warmup == 0.0
    assert read.paired_vs_reference == Paired(n_items=150, ci_low=-0.03, test="sequential")
    assert read.accuracy_floor is not None and read.accuracy_floor.decision == "feasible"
    assert read.step == Stepped(lever="batch_size", value=8, from_trial=0, also=["dtype"])
    assert read.owner is not None and (read.owner.host, read.owner.pid) == ("h", 12)
    assert source_words(read) == "step batch_size -> 8 from trial 0 (also changed: dtype)"


def test_a_key_of_the_wrong_kind_reads_as_unknown_and_the_rest_still_reads() -> None:
    read = record(
        environment={"runner": 5, "clock": "wall"},
        time_s={"total": "x", "startup": [1], "warmup": "1.5"},
        paired_vs_reference={"ci_low": "0.5", "n_items": True, "ci_high": 0.1},
        step={"lever": 1, "value": {"a": 1}, "from_trial": 0, "also": "dtype"},
        owner={"host": "h", "pid": "twelve"},
    )
    assert (read.environment.runner, read.environment.clock) == (None, "wall")
    assert read.times.total == 0.0 and read.times.startup == 0.0
    assert read.times.warmup == 1.5  # lax, as TimeSplit always read: "1.5" seconds is 1.5
    # Strict where readers took numbers only: a "0.5" or a true is no figure.
    assert read.paired_vs_reference == Paired(ci_high=0.1)
    assert read.step == Stepped(from_trial=0)
    assert read.owner == Owner(host="h")
    # What crashed the time shares before (float("x")) now counts as none.
    assert time_share([frozen({"time_s": {"total": "x", "startup": 2.0}})]).parts_s["startup"] == 2


def test_a_race_check_reads_typed_and_strict_as_figures_are() -> None:
    read = record(
        race_check={"incumbent": 2, "kept": False, "tokens_per_s": 10.5, "wait_share": 0.6,
                    "incumbent_tokens_per_s": "12", "incumbent_ci_rel": None}
    )  # fmt: skip
    # A "12" is no figure: it reads as unknown, and the rest still reads.
    assert read.race_check == RaceCheck(incumbent=2, kept=False, tokens_per_s=10.5, wait_share=0.6)
    assert record().race_check is None


def test_keys_of_another_autotune_are_left_aside_but_kept_as_stored() -> None:
    stored = {"n_items": 3, "from_the_future": 1}
    read = record(paired_vs_reference=stored, environment={"runner": "server", "lmdeploy": "1"})
    assert read.paired_vs_reference is not None
    assert read.paired_vs_reference.n_items == 3 and read.paired_vs_reference.model_extra is None
    assert read.paired_vs_reference.stored() == stored
    assert read.environment.model_extra == {"lmdeploy": "1"}


def test_an_empty_or_null_part_is_none_recorded() -> None:
    for empty in ({}, None):
        read = record(
            time_s=empty, paired_vs_reference=empty, accuracy_floor=empty, step=empty, owner=empty
        )
        assert read.time_s is None and read.paired_vs_reference is None
        assert read.accuracy_floor is None and read.step is None and read.owner is None
        assert read.times == TimeSplit() and source_words(read) == "sampler"
    assert record(environment=None).environment == Environment()
    assert record(environment={}).environment.stored() == {}


PARTS_STORED = ["environment", "time_s", "paired_vs_reference", "accuracy_floor", "step", "owner"]


@pytest.mark.parametrize("part", [*PARTS_STORED, "race_check"])
@pytest.mark.parametrize("value", ["x", 3, [], [1], True, math.nan])
def test_a_part_that_is_no_mapping_fails_in_the_words_of_a_mapping(part: str, value: Any) -> None:
    shown = f" (got {value!r:.60})" if isinstance(value, str | int | float) else ""
    problem = TrialRecord.problem({"config": CONFIG, part: value})
    assert problem == f"{part}: Input should be a valid dictionary{shown}"


def test_best_json_shows_the_time_split_as_stored() -> None:
    """In its order, with a key this version does not name and a value of the wrong kind."""
    time_s = {"total": 9.0, "startup": 1.0, "older_part": 2.0, "warmup": "x"}
    summary = trial_summary(frozen({"time_s": time_s}))
    assert summary["time_s"] == time_s and list(summary["time_s"]) == list(time_s)
    assert trial_summary(frozen({"time_s": {}}))["time_s"] is None


def test_a_part_writes_the_mapping_it_was_read_from_or_the_fields_it_was_given() -> None:
    """Issue 55: the writer stores a part as a mapping. One read from the storage goes back as
    it was (keys of another autotune, their order); one built here holds what it was given,
    not every field's default (a step without other levers stores no `also`)."""
    read = Paired.of({"test": "sequential", "n_items": 32, "from_a_newer": 1})
    assert read.written() == {"test": "sequential", "n_items": 32, "from_a_newer": 1}
    assert list(read.written()) == ["test", "n_items", "from_a_newer"]
    step = Step({}, "batch_size", 8, 0, new_launch=False).describe()
    assert step.written() == {"lever": "batch_size", "value": 8, "from_trial": 0}
    assert owner().written().keys() == {"host", "pid", "started"}


def test_a_failure_reads_in_words_and_an_empty_one_is_none_recorded() -> None:
    assert Failure.recorded({"failure_kind": "oom", "failure_reason": 7}) == Failure(
        failure_kind="oom", failure_reason="7"
    )
    assert not Failure.recorded({"failure_kind": "", "config": {}})
    assert Failure(failure_reason="gone")


def test_an_environment_takes_only_entries_it_names() -> None:
    stored = {"runner": "server", "engine_version": "0.9"}
    added = with_entries(stored, launch_id="a-1", **{STARTUP_BESIDE: "started beside"})
    assert list(added) == ["runner", "engine_version", "launch_id", STARTUP_BESIDE]
    assert stored == {"runner": "server", "engine_version": "0.9"}
    with pytest.raises(TypeError, match="no field 'launch'"):
        with_entries(stored, launch="a-1")


def test_a_confirmation_reads_typed_and_shows_what_best_json_shows() -> None:
    verdict = Confirmed.of(
        {
            "decision": "confirmed",
            "index": 2,
            "error": 0.05,
            "n_items": 40,
            "holdout_items": 60,
            "holdout_digest": "ab12",
            "mean_diff": 0.0,
            "ci_low": -0.01,
        }
    )
    assert verdict.decision == "confirmed" and verdict.n_items == 40
    assert verdict.shown() == {
        "items": 40,
        "holdout_items": 60,
        "holdout_digest": "ab12",
        "confirmation": 2,
        "error": 0.05,
    }
    assert Confirmed.of({"n_items": "40"}).n_items is None  # strict, as figures are
