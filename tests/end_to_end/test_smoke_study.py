"""The whole loop through the real CLI: a smoke study with real inference, then best and export."""

from __future__ import annotations

import html
import json
import math
import os
import re
import subprocess
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from small_space import autotune_cli, quick_space, small_evalset

from autotune.accuracy.floor import floor_warning
from autotune.records.stored import TrialRecord
from autotune.report.data import why_no_tpot
from autotune.space import Constraints

pytestmark = pytest.mark.slow

TRIAL_ATTRS = (
    "throughput_ci_rel",
    "launch_id",
    "launch_started",
    "time_s",
    "deployable",
    "deployability",
    "accuracy",
    "accuracy_by_category",
    "item_scores",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "tpot_p50_ms",
    "tpot_p95_ms",
    "e2e_latency_p50_ms",
    "e2e_latency_p95_ms",
    "throughput_output_tokens_per_s",
    "throughput_requests_per_s",
    "peak_memory_mib",
    "memory_source",
    "startup_s",
    "compile_s",
    "measured_requests",
    "config",
    "constraints",
    "environment",
    "schema_version",
)


def autotune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # A wide terminal, so `best` tables are not folded mid-row.
    return autotune_cli(*args, cwd=cwd, timeout=1200, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def smoke_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, optuna.Study]:
    """`autotune run --space smoke --trials 6` in a fresh folder, with default storage.

    The smoke space with its load capped at 1.5 s of steady window after 1 s of settling
    (instead of 10 s and 5 s), without screening (tests/accuracy/test_reuse_and_screening.py checks
    it), and on 8 of the smoke set's 32 items (both categories): load, screening and accuracy
    were 75% of the study's time, and every figure these tests check is recorded either way.
    """
    workdir = tmp_path_factory.mktemp("smoke")
    space = quick_space(
        "smoke",
        workdir,
        evalset=small_evalset(workdir),
        screening_items=0,
        max_measure_s=1.5,
        max_warmup_s=1,
    )
    result = autotune("run", "--space", str(space), "--trials", "6", cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    (workdir / "run.log").write_text(result.stderr, encoding="utf-8")
    (workdir / "run.out").write_text(result.stdout, encoding="utf-8")
    db = workdir / "studies" / "smoke.db"
    assert db.is_file()
    study = optuna.load_study(study_name="smoke", storage=f"sqlite:///{db}")
    return workdir, study


def test_six_trials_and_a_reference(smoke_study: tuple[Path, optuna.Study]) -> None:
    _, study = smoke_study
    trials = study.get_trials()
    # Six counted trials; a proposal of a measured configuration is recorded, not counted.
    assert len([t for t in trials if "duplicate_of" not in t.user_attrs]) == 6
    assert all(t.state.is_finished() for t in trials)
    first = trials[0]
    assert first.user_attrs["is_reference"] is True
    assert first.state == TrialState.COMPLETE
    assert first.user_attrs["config"]["image_max_side"] is None
    assert first.user_attrs["config"]["do_sample"] is False


def test_every_completed_trial_carries_its_figures(smoke_study: tuple[Path, optuna.Study]) -> None:
    _, study = smoke_study
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert complete
    for trial in complete:
        # A repeated proposal copies its twin's figures; it ran on no launch of its own.
        own_run = ("launch_id", "launch_started") if "duplicate_of" in trial.user_attrs else ()
        # A trial over the memory budget or latency SLO is not judged: no accuracy figures.
        unjudged = TrialRecord.of(trial).accuracy_not_judged
        if unjudged is not None:
            own_run += ("accuracy", "accuracy_by_category", "item_scores")
            assert unjudged.reason in ("memory", "latency") and unjudged.words
        # One the floor passed, slower than a confirmed one: judged, not confirmed, and why.
        skipped = TrialRecord.of(trial).confirmation_skipped
        if skipped is not None:
            assert "confirmation" not in trial.user_attrs and skipped.confirmed_trial is not None
            assert TrialRecord.of(trial).accuracy_not_judged is None
        missing = [n for n in TRIAL_ATTRS if n not in trial.user_attrs and n not in own_run]
        assert not missing, f"trial {trial.number} lacks {missing}"
        attrs = trial.user_attrs
        # The load ran until its rate settled and its interval closed, or its caps; the
        # requests inside the steady window are at least one batch of it.
        assert attrs["load_requests"] >= attrs["measured_requests"] >= 1
        assert attrs["measured_window_s"] > 0
        assert attrs["measure_stop_reason"] in ("converged", "max_seconds", "max_requests")
        # The recorded interval adds the launch-to-launch spread the smoke space measured
        # (launch_spread_rel 0.03), so a fresh launch lands inside it. A window too short for
        # four batch means (a slow configuration on busy cores) has no interval: NaN in both.
        within, recorded = attrs["throughput_ci_within_rel"], attrs["throughput_ci_rel"]
        if math.isnan(within):
            assert math.isnan(recorded) and attrs["throughput_batches"] < 4
        else:
            assert within < recorded < math.inf
        if attrs["measure_stop_reason"] == "converged":
            assert attrs["throughput_ci_within_rel"] <= 0.03  # the stop rule's own target
            assert attrs["throughput_ci_rel"] <= 0.10
        if "duplicate_of" not in attrs:
            assert attrs["time_s"]["measuring"] > 0
        assert attrs["ttft_p50_ms"] > 0
        # TPOT needs answers of two tokens or more streamed in several pieces: a reader that
        # cannot read a shrunk image may answer with one, and `swift deploy` sends the tiny
        # reader's short answers in one piece (the report says which: why_no_tpot).
        record = TrialRecord.of(trial)
        if why_no_tpot(record) is None:
            assert attrs["tpot_p50_ms"] > 0
        else:
            assert (
                record.config["image_max_side"] is not None or record.config["backend"] == "swift"
            )
        assert attrs["e2e_latency_p95_ms"] >= attrs["e2e_latency_p50_ms"]
        # In process: the worker's RSS; a swift server (the reference): its process tree's.
        assert attrs["memory_source"] in ("rss", "rss_tree") and attrs["peak_memory_mib"] > 50
        if unjudged is None:
            assert 0.0 <= attrs["accuracy"] <= 1.0
            assert set(attrs["accuracy_by_category"]) == {"shapes", "text_line"}
        assert trial.values[0] == pytest.approx(attrs["throughput_output_tokens_per_s"])


def test_sampling_knobs_only_when_sampling(smoke_study: tuple[Path, optuna.Study]) -> None:
    _, study = smoke_study
    for trial in study.get_trials():
        sampled = trial.params.get("do_sample", False)
        assert ("temperature" in trial.params) == sampled


def test_best_shows_the_recommendation(smoke_study: tuple[Path, optuna.Study]) -> None:
    workdir, study = smoke_study
    result = autotune("best", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert "recommended: trial" in result.stdout
    as_json = json.loads(autotune("best", "--json", cwd=workdir).stdout)
    assert as_json["study"] == "smoke"
    assert as_json["recommended"]["trial"] in {t.number for t in study.trials}
    # The floor explains itself: 8 items cannot show a 0.05 margin unless the reference
    # answers every one of them right (then any candidate that differs has lost accuracy).
    reference = next(t for t in study.trials if t.user_attrs.get("is_reference"))
    constraints = Constraints.model_validate(study.user_attrs["space"]["constraints"])
    expected = floor_warning(
        8,
        reference.user_attrs["accuracy"],
        constraints,
        evalset=str(workdir / "evalset" / "items.jsonl"),  # named by its file: not bundled
    )
    assert as_json["floor_warning"] == expected
    if expected is not None:
        assert "8 items let the sequential floor pass" in expected
        assert "8 items let the sequential floor pass" in result.stdout


def test_one_count_in_the_progress_best_and_the_report(
    smoke_study: tuple[Path, optuna.Study],
) -> None:
    """The run's progress lines, its summary, `best` and the report count the trials the same
    way; a repeated proposal is named as one, never a failure, a row or a deploy block."""
    from autotune.report.data import collect
    from autotune.report.html import render
    from autotune.report.text import best_json, best_text
    from autotune.study.results.counting import trial_counts

    workdir, study = smoke_study
    counts = trial_counts(study)
    line = counts.line()
    progress = (workdir / "run.log").read_text(encoding="utf-8").splitlines()
    assert line in progress and line in (workdir / "run.out").read_text(encoding="utf-8")
    # In-process: `best` and `report` as the CLI calls them, without three more start-ups.
    assert line in best_text(study).splitlines()
    assert best_json(study)["trials"] == counts.to_dict()
    numbered = [x for x in progress if re.match(r"\[\d+/6\] trial", x)]
    repeats = [x for x in progress if x.startswith("[repeat, not counted] trial")]
    assert (len(numbered), len(repeats)) == (counts.counted, counts.repeats)
    assert counts.counted == 6
    assert counts.failed == 0 and not any(x.startswith("[failed") for x in progress)
    report = render(collect(study))
    assert f'<p class="counts">{line}</p>' in report
    top = report.split('id="top"', 1)[1].split("<h2 id=", 1)[0]
    shown = {int(n) for n in re.findall(r"<summary>trial (\d+) deploy", top)}
    duplicates = {t.number for t in study.trials if "duplicate_of" in t.user_attrs}
    assert shown and not shown & duplicates
    for number in duplicates:
        assert f"trial {number} repeated trial " in report


def test_every_infeasible_trial_says_why(smoke_study: tuple[Path, optuna.Study]) -> None:
    workdir, study = smoke_study
    as_json = json.loads(autotune("best", "--json", cwd=workdir).stdout)
    infeasible = [
        t
        for t in study.get_trials(states=(TrialState.COMPLETE,))
        if (
            any(v > 0 for k, v in t.user_attrs["constraints"].items() if k != "deployable")
            or "accuracy_not_judged" in t.user_attrs  # never feasible: its accuracy unknown
        )
        and "duplicate_of" not in t.user_attrs
    ]
    assert set(as_json["infeasible"]) == {str(t.number) for t in infeasible}
    progress = (workdir / "run.log").read_text(encoding="utf-8")
    for trial in infeasible:
        reasons = trial.user_attrs["infeasible_because"]
        assert reasons and as_json["infeasible"][str(trial.number)] == reasons
        line = next(x for x in progress.splitlines() if f"] trial {trial.number} " in x)
        assert f"(infeasible: {reasons[0]}" in line
        words = ("sequence", "memory", "floor", "accuracy not judged")
        assert all(any(w in r for w in words) for r in reasons)


def test_export_swift_and_lmdeploy(smoke_study: tuple[Path, optuna.Study]) -> None:
    workdir, _ = smoke_study
    swift = autotune("export", "--format", "swift", cwd=workdir)
    assert swift.returncode == 0, swift.stderr
    command = [line for line in swift.stdout.splitlines() if not line.startswith("#")]
    assert len(command) == 1
    assert "swift deploy --model" in command[0]
    assert "--model_type qwen3_vl --template qwen3_vl --infer_backend transformers" in command[0]
    lmdeploy = autotune("export", "--format", "lmdeploy", cwd=workdir)
    assert lmdeploy.returncode == 0, lmdeploy.stderr
    assert "lmdeploy serve api_server" in lmdeploy.stdout
    assert "--backend pytorch" in lmdeploy.stdout
    # The smoke trials run float32, which LMDeploy cannot: the output must say so.
    assert "float32" in lmdeploy.stdout


def test_the_swift_deploy_defaults_are_the_baseline(
    smoke_study: tuple[Path, optuna.Study],
) -> None:
    """The smoke study measures `swift deploy` as its documentation starts it (no flag of
    autotune's) at the space's largest concurrency, and `best`, its JSON and the report state
    the recommendation's gain over it; with a price, the cost per million output tokens."""
    from autotune.report.data import collect
    from autotune.report.html import render

    workdir, study = smoke_study
    baselines = [t for t in study.trials if t.user_attrs.get("baseline")]
    assert len(baselines) == 1
    base = baselines[0]
    assert base.state == TrialState.COMPLETE, base.user_attrs.get("failure_reason")
    assert base.user_attrs["baseline"] == "swift deploy's defaults"
    config = base.user_attrs["config"]
    assert config["engine_defaults"] is True and config["max_batch_size"] is None
    assert (config["batch_size"], config["image_max_side"], config["do_sample"]) == (8, None, False)
    command = autotune("export", "--trial", str(base.number), "--format", "swift", cwd=workdir)
    assert command.returncode == 0, command.stderr
    line = next(x for x in command.stdout.splitlines() if x.startswith("swift deploy"))
    # Only what names the model and where it listens: no dtype, batch cap or attention flag.
    assert not {"--max_batch_size", "--torch_dtype", "--attn_impl", "--infer_backend"} & set(
        line.split()
    )

    as_json = json.loads(
        autotune("best", "--json", "--gpu-price-per-hour", "2.5", cwd=workdir).stdout
    )
    assert as_json["baseline"] == {"trial": base.number, "label": "swift deploy's defaults"}
    rate = as_json["recommended"]["figures"]["throughput_output_tokens_per_s"]
    cost = as_json["cost"]
    assert cost["gpu_price_per_hour"] == 2.5
    assert cost["recommended_usd_per_million_tokens"] == pytest.approx(2.5 / (rate * 3600) * 1e6)
    base_rate = base.user_attrs["throughput_output_tokens_per_s"]
    assert cost["baseline_usd_per_million_tokens"] == pytest.approx(2.5 / (base_rate * 3600) * 1e6)
    text = autotune("best", cwd=workdir).stdout
    gain = as_json["versus_baseline"]
    if as_json["recommended"]["trial"] == base.number:
        assert gain is None and "the baseline itself (swift deploy's defaults)" in text
        return
    assert gain["times"] == pytest.approx(rate / base_rate)
    words = re.search(r"gain: (\d+\.\d\d)× \((±\d+%|no interval)\) swift deploy's defaults", text)
    assert words is not None, text
    assert float(words.group(1)) == pytest.approx(gain["times"], abs=0.006)
    assert "cost:" not in text  # no price given, none assumed
    report = render(collect(study, gpu_price_per_hour=2.5))
    assert html.escape(words.group(0)) in report and "per million output tokens" in report
