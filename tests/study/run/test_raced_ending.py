"""Issue 41: a trial stopped by racing ends as a completed one does, through the one writer
(autotune.records.writer): its record is checked whole, spooled before the storage takes it,
and recovered by the next run when the storage refused it, as PRUNED with its partial figures
and the reason it lost."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from small_space import quick_space

from autotune.engines.measurement import Measurement
from autotune.errors import StudyError
from autotune.measure.convergence import RACED, RaceBound
from autotune.measure.registry import THROUGHPUT
from autotune.params import TrialConfig
from autotune.records.parts import RaceCheck
from autotune.records.stored import SpooledTrial, TrialRecord
from autotune.records.writer import write_trial
from autotune.space import load_space
from autotune.study import plan_study
from autotune.study.results.progress import Progress
from autotune.study.run.objective import Objective, _Verdict
from autotune.study.run.racing import Incumbent, raced_attrs
from autotune.study.store.recovery import Spool, recover


def _objective(tmp_path: Path) -> tuple[Objective, optuna.Study, Spool]:
    space = load_space(str(quick_space("smoke", tmp_path)))
    url = f"sqlite:///{tmp_path}/raced.db"
    plan = plan_study(space, study_name="raced", storage_url=url)
    study = optuna.create_study(study_name="raced", storage=url, directions=space.directions())
    spool = Spool(url, "raced")
    # Only the recording half of the objective runs here: no launch, steering or budget.
    objective = Objective(plan, Progress(total=1), None, None, None, spool)  # type: ignore[arg-type]
    return objective, study, spool


def _raced_verdict(**figures: object) -> _Verdict:
    m = Measurement(
        TrialConfig(batch_size=2),
        {THROUGHPUT: 41.5, "throughput_ci_rel": 0.2, "e2e_latency_p95_ms": 310.0, **figures},
        None,
        {"clock": "wall clock"},
        "none",
        stop_reason=RACED,
    )
    # The stop was checked against the incumbent measured again beside the same load.
    check = RaceCheck(incumbent=1, kept=True, tokens_per_s=41.0, incumbent_tokens_per_s=150.0,
                      wait_share=0.6, incumbent_wait_share=0.55)  # fmt: skip
    rival = Incumbent(number=1, tokens_per_s=160.0, bound=RaceBound(150.0), check=check)
    trail = [{"tokens_per_s": 41.0, "ci_rel": 0.1, "elapsed_s": 6.0}]
    attrs, reason = raced_attrs(m, rival, "launch-a", trail)
    return _Verdict(m, attrs, {}, [], raced=reason)


def test_a_raced_trial_is_spooled_and_recovered_as_raced(tmp_path: Path) -> None:
    objective, study, spool = _objective(tmp_path)
    trial = study.ask()
    write_trial(trial, TrialRecord.part(config=TrialConfig(batch_size=2).model_dump()))
    time_s = {"startup": 0.0, "measuring": 6.0}
    with pytest.raises(optuna.TrialPruned, match="stopped by racing after 6 s of load"):
        objective._record(trial, _raced_verdict(), time_s)
    # Stored on the trial, and kept in the spool until the storage has the finished trial.
    assert trial.user_attrs["raced_by"] == 1 and trial.user_attrs[THROUGHPUT] == 41.5
    [kept] = spool.pending()
    spooled = SpooledTrial.read(kept.read_text(encoding="utf-8"))
    assert (spooled.state, spooled.values) == ("PRUNED", [])
    assert spooled.user_attrs["raced_reason"].startswith("stopped by racing")
    assert "measured again right after" in spooled.user_attrs["raced_reason"]
    assert spooled.user_attrs["race_check"]["kept"] is True
    assert spooled.user_attrs["time_s"] == time_s
    # The storage never took the ending (the process died): the next run records it as the
    # race's loser, with its partial figures, not as a failure or a completed trial.
    study.tell(trial, state=TrialState.FAIL)
    notes = recover(study, spool)
    assert notes[0].startswith("recorded the results of trial 0"), notes
    recovered = study.trials[-1]
    assert recovered.state == TrialState.PRUNED
    record = TrialRecord.of(recovered)
    assert record.raced_by == 1 and record.figure(THROUGHPUT) == 41.5
    assert record.measure_stop_reason == RACED
    assert record.race_check is not None and record.race_check.incumbent_tokens_per_s == 150.0
    assert spool.pending() == []


def test_a_raced_record_that_would_not_read_back_is_neither_spooled_nor_stored(
    tmp_path: Path,
) -> None:
    objective, study, spool = _objective(tmp_path)
    trial = study.ask()
    broken = _raced_verdict(accuracy=float("nan"))  # a NaN share reads as no accuracy at all
    with pytest.raises(StudyError, match="trial 0 would store an unreadable record: accuracy"):
        objective._record(trial, broken, {})
    assert spool.pending() == [] and "raced_by" not in trial.user_attrs


@pytest.mark.parametrize(
    ("state", "values", "problem"),
    [
        ("COMPLETE", [], "a completed trial has at least one objective value"),
        ("PRUNED", [1.0], "a trial stopped by racing has no objective values"),
        ("FAIL", [], "state"),
    ],
)
def test_a_spool_file_s_state_and_values_must_agree(
    state: str, values: list[float], problem: str
) -> None:
    text = SpooledTrial(number=0, values=[1.0], user_attrs={}).model_dump_json()
    text = text.replace('"state":"COMPLETE","values":[1.0]', f'"state":"{state}","values":{values}')
    with pytest.raises(ValueError, match=problem):
        SpooledTrial.read(text)
