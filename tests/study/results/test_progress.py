"""Progress while a study runs: a bar with the phase on a terminal, one plain line per trial
elsewhere; and the --json output of `best` and `export` that scripts read instead."""

from __future__ import annotations

import io
import json
import re

import optuna
import pytest
from click.testing import CliRunner
from rich.console import Console

from autotune.cli import main
from autotune.params import TrialConfig
from autotune.study.results.progress import Progress


@pytest.fixture(scope="module")
def study(small_study: tuple[str, str]) -> optuna.Study:
    url, name = small_study
    return optuna.load_study(study_name=name, storage=url)


def run_two_trials(progress: Progress, study: optuna.Study) -> None:
    trials = study.get_trials(deepcopy=False)
    progress.start(done=0, study_name="small")
    for trial in (trials[2], trials[6]):
        progress.trial_started(trial.number, TrialConfig())
        for phase in ("loading", "warm-up", "screening", "load test", "accuracy"):
            progress.phase(phase)
        progress.trial_finished(study, trial)
    progress.finish(study)


def test_terminal_shows_a_bar_with_phase_and_best(study: optuna.Study) -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=160, highlight=False)
    with Progress(total=4, console=console) as progress:
        run_two_trials(progress, study)
        assert progress.bar is None  # finish took the bar down
    out = buffer.getvalue()
    assert "trial 2: load test" in out
    assert "trial 6: accuracy" in out
    assert "1/4" in out  # the bar counts counted trials: a failed one does not count
    # Each line names where its trial came from and what differs from the reference.
    assert re.search(r"\[1/4\] trial 2 \((sampler|step [^)]+)[^)]*\) 0 s: 305\.5 tok/s, "
                     r"p95 4200 ms, acc 0\.880", out), out  # fmt: skip
    assert "best: trial 2 (305.5 tok/s, p95 4200 ms)" in out
    assert re.search(r"\[failed, not counted\] trial 6 \([^)]+\) 0 s: FAIL \(out of memory; "
                     "the sampler now avoids", out), out  # fmt: skip
    assert "[2/4]" not in out


def test_not_a_terminal_writes_plain_lines_per_trial_and_phase(study: optuna.Study) -> None:
    buffer = io.StringIO()
    run_two_trials(Progress(total=4, console=Console(file=buffer, width=160)), study)
    lines = buffer.getvalue().splitlines()
    assert lines[0] == "study 'small': 0/4 trials finished"
    trial_lines = [line.split(" s:")[0] for line in lines[1:] if line.startswith("[")]
    # A failed trial does not count towards --trials and says so, not "[1/4]" again.
    assert trial_lines[0] == "[1/4] trial 2 (sampler: image_max_side=768 batch_size=16) 0"
    assert trial_lines[1].startswith("[failed, not counted] trial 6 (") and len(trial_lines) == 2
    # A long GPU trial's log says where it is: one indented line per phase, in order.
    phases = [line.split(": ")[1].split(" (")[0] for line in lines if line.startswith("  trial 6")]
    assert phases == ["starting", "loading", "warm-up", "screening", "load test", "accuracy"]
    assert "\x1b" not in buffer.getvalue()  # no control codes in a log file


def test_quiet_writes_nothing(study: optuna.Study) -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True)
    run_two_trials(Progress(total=4, quiet=True, console=console), study)
    assert buffer.getvalue() == ""


def test_best_and_export_json(small_study: tuple[str, str]) -> None:
    url, _ = small_study
    best = CliRunner().invoke(main, ["best", "--storage", url, "--json"])
    assert best.exit_code == 0, best.output
    data = json.loads(best.output)
    assert data["recommended"]["trial"] == 2
    assert data["feasible_found"] is True
    assert [t["trial"] for t in data["pareto_front"]] == [0, 2, 5]
    export = CliRunner().invoke(
        main, ["export", "--storage", url, "--format", "lmdeploy", "--json"]
    )
    assert export.exit_code == 0, export.output
    data = json.loads(export.output)
    assert data["trial"] == 2
    assert data["argv"][:3] == ["lmdeploy", "serve", "api_server"]


def test_the_time_line_leaves_the_counting_to_the_counts_line() -> None:
    """The time line says where the seconds went and on how many launches ("1 launch", not
    "1 launches"); which trials were repeats or failures is the counts line's to say."""
    from optuna.trial import TrialState, create_trial

    from autotune.study.results.timeshare import time_share

    def trial(state: TrialState, **attrs: object) -> optuna.trial.FrozenTrial:
        time_s = {"total": 10.0, "startup": 2.0, "measuring": 6.0}
        values = [1.0] if state == TrialState.COMPLETE else None
        return create_trial(state=state, values=values, user_attrs={"time_s": time_s, **attrs})

    trials = [
        trial(TrialState.COMPLETE, launch_id="a"),
        trial(TrialState.COMPLETE, launch_id="a", duplicate_of=0),
        trial(TrialState.FAIL, launch_id="b", failure_kind="oom"),
        trial(TrialState.COMPLETE, launch_id="b"),
    ]
    share = time_share(trials)
    assert share.line().startswith("40 s of trial time on 2 launches: ")
    assert time_share(trials[:2]).line().startswith("20 s of trial time on 1 launch: ")
    assert "failed" not in share.line() and "trials" not in share.line()


def test_the_time_line_names_what_other_is_and_every_part_it_timed() -> None:
    """Screening, recording and waiting are timed parts, not a silent 'other'; what is left
    is named; a part no trial spent time in is left out."""
    from optuna.trial import TrialState, create_trial

    from autotune.study.results.timeshare import OTHER, time_share

    time_s = {
        "total": 100.0,
        "startup": 10.0,
        "warmup": 0.0,
        "screening": 5.0,
        "measuring": 60.0,
        "accuracy": 10.0,
        "recording": 8.0,
        "gpu_wait": 3.0,
        "twin_wait": 1.0,
    }
    share = time_share(
        [create_trial(state=TrialState.COMPLETE, values=[1.0], user_attrs={"time_s": time_s})]
    )
    line = share.line()
    for words in ("start-up 10%", "screening 5%", "measuring 60%", "accuracy 10%", "recording 8%"):
        assert words in line
    assert "waiting 4%" in line  # for GPUs and for a twin trial, together
    assert f"other ({OTHER}) 3%" in line
    assert "warm-up" not in line
    assert share.to_dict()["other_s"] == pytest.approx(3.0)


def test_what_was_other_is_split_into_named_parts() -> None:
    """Issue 40: 'other' was 24% of the first run's trial time. The sampler's proposal, the
    study reads before measuring and the engine hand-off (the engine call less its phases) are
    timed parts now; what is left is named too."""
    from optuna.trial import TrialState, create_trial

    from autotune.study.results.timeshare import OTHER, time_share

    time_s = {"total": 100.0, "startup": 20.0, "warmup": 5.0, "measuring": 50.0,
              "accuracy": 10.0, "recording": 2.0, "proposal": 4.0, "study_reads": 3.0,
              "engine_call": 71.0}  # fmt: skip
    share = time_share(
        [create_trial(state=TrialState.COMPLETE, values=[1.0], user_attrs={"time_s": time_s})]
    )
    line = share.line()
    for words in ("sampler and config writes 4%", "study reads 3%", "engine hand-off 6%"):
        assert words in line, line
    assert f"other ({OTHER}) 0%" not in line and share.other_s == pytest.approx(0.0)


def test_a_failed_trial_s_engine_call_is_its_own_part_not_a_hand_off() -> None:
    """A failed trial records no engine phase: its whole engine call read as hand-off (48% of
    an H100 study whose reference failed); it is its own part."""
    from optuna.trial import TrialState, create_trial

    from autotune.study.results.progress import time_line
    from autotune.study.results.timeshare import time_share

    failed_s = {"total": 200.0, "startup": 20.0, "engine_call": 174.0}
    measured_s = {"total": 100.0, "measuring": 60.0, "accuracy": 30.0, "engine_call": 95.0}
    failed = {"time_s": failed_s, "failure_kind": "no-tokens"}
    trials = [
        create_trial(state=TrialState.FAIL, user_attrs=failed),
        create_trial(state=TrialState.COMPLETE, values=[1.0], user_attrs={"time_s": measured_s}),
    ]
    share = time_share(trials)
    assert share.parts_s["failed"] == pytest.approx(174.0)
    assert share.parts_s["hand_off"] == pytest.approx(5.0)  # the measured trial's alone
    assert "failed trials' engine calls 58%" in share.line()
    assert share.to_dict()["failed_s"] == pytest.approx(174.0)
    assert "hand-off" not in time_line(trials[0])


def test_a_part_no_one_timed_counts_as_none() -> None:
    """An endpoint study's start-up is NaN (autotune did not start the server)."""
    from optuna.trial import TrialState, create_trial

    from autotune.study.results.progress import time_line
    from autotune.study.results.timeshare import time_share

    time_s = {"total": 10.0, "startup": float("nan"), "measuring": 8.0}
    trial = create_trial(state=TrialState.COMPLETE, values=[1.0], user_attrs={"time_s": time_s})
    line = time_share([trial]).line()
    assert "nan" not in line and "measuring 80%" in line and "start-up" not in line
    assert time_line(trial) == " (measuring 8 s)"
