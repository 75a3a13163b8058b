"""One count, one story: a study's trials counted once (measured, infeasible, screened out,
repeated proposals, failed with their reason) and told the same way by the progress lines,
`best` (text and JSON) and the report; repeats are never rows, points or deploy blocks of their
own, importances rest on distinct trials, and the report says why the reference itself won."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.trial import TrialState
from rich.console import Console
from study_factory import Spec, _p, build_study

from autotune.cli import main
from autotune.params import TrialConfig
from autotune.report.data import MIN_IMPORTANCE_TRIALS, collect
from autotune.report.text import best_json, best_text
from autotune.study.results.counting import trial_counts
from autotune.study.results.progress import Progress

# 0 the reference; 1 faster but infeasible; 2 repeats 0; 3 ties with 0 on throughput (their
# intervals overlap) with a worse p95, so the reference wins; 4 repeats 1; 5 out of memory;
# 6 screened out; 7 slower, the best p95, answers of one token (no TPOT).
SPECS = [
    Spec(_p("sdpa", None, 1), 40.0, 2100, 0.90, reference=True, ci_rel=0.05),
    Spec(_p("eager", 512, 16), 90.0, 1500, 0.60, ci_rel=0.05),
    Spec({}, 0, 0, 0, duplicate_of=0),
    Spec(_p("sdpa", 1024, 4), 41.5, 2300, 0.90, ci_rel=0.05),
    Spec({}, 0, 0, 0, duplicate_of=1),
    Spec(_p("sdpa", 768, 16), 0, 0, 0, state=TrialState.FAIL, failure="out of memory"),
    Spec(_p("eager", 512, 4), 0, 0, 0.40, state=TrialState.PRUNED),
    Spec(_p("eager", 1024, 1), 20.0, 900, 0.90, ci_rel=0.05, one_token=True),
]
MEASURED = {0, 1, 3, 7}


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, str]:
    url, name = build_study(tmp_path_factory.mktemp("counts"), study_name="counts", specs=SPECS)
    return optuna.load_study(study_name=name, storage=url), url


@pytest.fixture(scope="module")
def report(study: tuple[optuna.Study, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("report") / "counts.html"
    result = CliRunner().invoke(main, ["report", "--storage", study[1], "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def test_every_trial_is_counted_once_as_what_it_was(study: tuple[optuna.Study, str]) -> None:
    counts = trial_counts(study[0])
    assert (counts.measured, counts.infeasible, counts.screened) == (4, 1, 1)
    assert (counts.repeats, counts.failed, counts.total, counts.counted) == (2, 1, 8, 5)
    assert [(f.trial, f.kind) for f in counts.failures] == [(5, "oom")]
    assert counts.line() == (
        "8 trials: 5 counted towards --trials (4 measured, 1 of them infeasible; 1 screened "
        "out), 2 repeated proposals of a measured configuration (figures reused, not re-run, "
        "not counted), 1 failed (out of memory: trial 5; not counted)"
    )


def test_progress_best_and_report_tell_the_same_counts(
    study: tuple[optuna.Study, str], report: str
) -> None:
    line = trial_counts(study[0]).line()
    buffer = io.StringIO()
    progress = Progress(total=5, console=Console(file=buffer, width=100))
    progress.start(done=0, study_name="counts")
    for trial in study[0].get_trials():
        progress.trial_started(trial.number, TrialConfig())
        progress.trial_finished(study[0], trial)
    progress.finish(study[0])
    out = buffer.getvalue()
    assert line in out.splitlines()
    assert "[repeat, not counted] trial 2 (same configuration as trial 0, not re-run)" in out
    assert "[failed, not counted] trial 5" in out and "[5/5] trial 7" in out
    text = best_text(study[0])
    assert line in text.splitlines()
    assert "  trial 5 failed (out of memory): out of memory" in text
    assert best_json(study[0])["trials"] == trial_counts(study[0]).to_dict()
    assert f'<p class="counts">{line}</p>' in report
    assert "2 failed or repeated" not in out + text + report
    assert "time: " in text and " on 1 launch" not in text  # the factory records no time


def test_repeats_are_no_rows_points_or_deploy_blocks(report: str) -> None:
    assert "trial 2 repeated trial 0, trial 4 repeated trial 1" in report
    top = report.split('id="top"', 1)[1].split("<h2 id=", 1)[0]
    rows = [int(n) for n in re.findall(r"<tr(?: class='rec')?><td>(\d+)", top)]
    assert rows == [0, 3, 7]  # the feasible measured trials, each once
    assert [int(n) for n in re.findall(r"<summary>trial (\d+) deploy", top)] == rows
    points = re.search(r'Plotly\.newPlot\(\s*"plot-pareto",\s*(\[.*?\]),\s*\{', report, re.S)
    assert points is not None
    numbers = {n for trace in json.loads(points.group(1)) for n in trace.get("customdata") or []}
    assert numbers == MEASURED


def test_importances_rest_on_distinct_trials(study: tuple[optuna.Study, str], report: str) -> None:
    # Six completed trials, two of them repeats: four measured, too few to rank.
    data = collect(study[0])
    assert [t.number for t in data.complete] == sorted(MEASURED)
    assert data.importances.message == (
        f"needs at least {MIN_IMPORTANCE_TRIALS} measured trials ({len(MEASURED)} so far)"
    )


def test_intervals_in_tables_and_error_bars_on_the_plots(report: str) -> None:
    assert "<th>throughput (tok/s, 95% CI)</th>" in report
    assert "40.0 ±5.0%" in report and "41.5 ±5.0%" in report
    traces = json.loads(
        re.search(r'Plotly\.newPlot\(\s*"plot-pareto",\s*(\[.*?\]),\s*\{', report, re.S).group(1)
    )
    feasible = next(t for t in traces if t["name"] == "feasible, deployable")
    bars = dict(zip(feasible["customdata"], feasible["error_y"]["array"], strict=True))
    assert bars[0] == pytest.approx(2.0) and bars[3] == pytest.approx(2.075)
    batch = re.search(r'Plotly\.newPlot\(\s*"plot-batch",\s*(\[.*?\]),\s*\{', report, re.S)
    assert batch is not None and '"error_y"' in batch.group(1)


def test_the_reference_recommended_says_so_and_why(
    study: tuple[optuna.Study, str], report: str
) -> None:
    assert "Recommended: trial 0 — the reference itself" in report
    why = report.split("<ul class='why-reference'>", 1)[1].split("</ul>", 1)[0]
    assert "trial 1 (90.0 ±5.0% tok/s) is infeasible: accuracy 0.600" in why
    assert "trial 3 (41.5 ±5.0% tok/s) ties with it" in why and "worse e2e_latency_p95" in why
    # Its figures stand alone: no column comparing the reference with itself (+0%).
    recommended = report.split("id='recommended'", 1)[1].split("<h2", 1)[0]
    assert "<th>vs reference</th>" not in recommended and "+0%" not in recommended
    text = best_text(study[0])
    assert "the reference itself is recommended" in text and "trial 1 (90.0 ±5.0% tok/s)" in text


def test_samples_of_the_recommended_trial_right_and_wrong(report: str) -> None:
    recommended = report.split("id='recommended'", 1)[1].split("<h2", 1)[0]
    samples = recommended.split("<table class='samples'>", 1)[1].split("</table>", 1)[0]
    assert "<span class='good'>1.00</span>" in samples
    assert "<span class='bad'>0.00</span>" in samples
    assert "4 of 5 answers right; shown: 4 right and 1 wrong" in recommended


def test_infeasible_trials_show_their_speed(report: str) -> None:
    infeasible = report.split("id='infeasible'", 1)[1].split("<h2", 1)[0]
    speed = r"<td>1</td><td class='num'>90\.0 ±5\.0%</td><td class='num'>1500<"
    assert re.search(speed, infeasible)


def test_tpot_that_cannot_be_computed_says_so_never_nan(
    study: tuple[optuna.Study, str], report: str
) -> None:
    text = best_text(study[0])
    assert "nan" not in text.lower()
    row = next(line for line in text.splitlines() if re.match(r"│ 7\b", line))
    assert "n/a" in row
    assert "trial 7: TPOT n/a: its answers were one token long" in text
    assert ">nan<" not in report.lower()
    assert "title='TPOT n/a: its answers were one token long'>n/a</td>" in report


def test_a_study_without_repeats_or_failures_says_only_what_it_has(tmp_path: Path) -> None:
    url, name = build_study(tmp_path, study_name="plain", specs=SPECS[:2])
    line = trial_counts(optuna.load_study(study_name=name, storage=url)).line()
    assert line == "2 trials: 2 counted towards --trials (2 measured, 1 of them infeasible)"
