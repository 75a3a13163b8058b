"""The spool: results kept while the storage refuses them, recorded by the next run, and only
into the study they came from."""

from __future__ import annotations

import time
from pathlib import Path

import optuna

from autotune.study.recovery import Spool, recover, spool_payload


def _measured_trial(url: str) -> tuple[optuna.Study, Spool]:
    """A study whose trial 0 was measured but whose results the storage never took."""
    study = optuna.create_study(study_name="s", storage=url)
    trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    spool = Spool(url, "s")
    spool.write(trial.number, spool_payload(trial, [1.5], {"throughput": 1.5}))
    return study, spool


def test_spooled_results_are_recorded_into_their_own_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    study, spool = _measured_trial(url)
    notes = recover(study, spool)
    assert notes == ["recorded the results of trial 0, which the storage could not take then, "
                     "as trial 1"]  # fmt: skip
    recorded = study.trials[1]
    assert recorded.values == [1.5] and recorded.user_attrs["recovered_from_trial"] == 0
    assert spool.pending() == []


def test_results_spooled_for_a_deleted_study_never_enter_a_new_one_at_its_path(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    _, spool = _measured_trial(url)
    (tmp_path / "s.db").unlink()  # the user starts over under the same name
    fresh = optuna.create_study(study_name="s", storage=url)
    notes = recover(fresh, spool)
    assert fresh.trials == []
    assert len(notes) == 1 and notes[0].startswith("discarded the spooled results of a trial 0")
    assert spool.pending() == []
    # Also when the new study already has a trial 0 of its own, started later.
    _, spool = _measured_trial(f"sqlite:///{tmp_path}/t.db")
    (tmp_path / "t.db").unlink()
    fresh = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/t.db")
    time.sleep(1.1)  # its trial 0 starts a second after the spooled one
    fresh.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    assert recover(fresh, spool)[0].startswith("discarded")
    assert [t.state for t in fresh.trials] == [optuna.trial.TrialState.RUNNING]
