"""`autotune report`: one self-contained HTML file with the plots' data and the deploy commands."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.trial import TrialState
from study_factory import MAX_DROP, SPECS, Spec, _p, build_study, plot_data

from autotune.cli import main
from autotune.report.data import (
    FIRM_IMPORTANCE_TRIALS,
    MIN_IMPORTANCE_TRIALS,
    Importances,
    collect,
    params_words,
    what_ifs_title,
)
from autotune.report.plots import accuracy_figure, importance_figure


@pytest.fixture(scope="module")
def report_html(small_study: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    url, _ = small_study
    out = tmp_path_factory.mktemp("report") / "report.html"
    result = CliRunner().invoke(main, ["report", "--storage", url, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"report written to {out}" in result.output
    return out.read_text(encoding="utf-8")


def test_self_contained(report_html: str) -> None:
    # No script, stylesheet or image is fetched: plotly.js is inline.
    assert not re.search(r"<script[^>]+src=", report_html)
    assert not re.search(r"<link[^>]+href=[\"']https?:", report_html)
    assert not re.search(r"<img[^>]+src=[\"']https?:", report_html)
    assert "cdn.plot.ly" not in report_html.split("</script>", 1)[1]
    assert report_html.count("Plotly.newPlot(") == 4  # pareto, accuracy, batch, importance
    assert len(report_html) > 3_000_000  # the plotly.js bundle is in the file


def test_pareto_plot_marks_feasibility_and_accuracy(report_html: str) -> None:
    traces = {t["name"]: t for t in plot_data(report_html, "plot-pareto")}
    assert sorted(traces["feasible, deployable"]["customdata"]) == [0, 1, 2, 4, 5]
    assert traces["infeasible"]["customdata"] == [3]
    assert traces["infeasible"]["marker"]["color"] == [0.62]  # accuracy as colour
    assert 305.5 in traces["feasible, deployable"]["y"]
    assert "recommended (trial 2)" in traces
    assert "reference (trial 0)" in traces
    front = traces["feasible Pareto front"]
    assert front["x"] == sorted(front["x"])  # trials 0, 5, 2 by latency
    assert len(front["x"]) == 3


def test_accuracy_and_batch_plots(report_html: str) -> None:
    accuracy = plot_data(report_html, "plot-accuracy")
    sides = {x for trace in accuracy for x in trace["x"]}
    assert sides == {"full", "1024", "768", "512"}
    batch = plot_data(report_html, "plot-batch")
    assert {x for trace in batch for x in trace["x"]} == {"1", "4", "16"}
    importance = plot_data(report_html, "plot-importance")
    assert {t["name"] for t in importance} == {
        "throughput_output_tokens_per_s",
        "e2e_latency_p95_ms",
    }
    assert set(importance[0]["y"]) == {"attn_implementation", "image_max_side", "batch_size"}


def test_top_configurations_with_export_commands(report_html: str) -> None:
    assert "Recommended: trial 2" in report_html
    assert "swift deploy --model Qwen/Qwen3-VL-2B-Instruct" in report_html
    assert "lmdeploy serve api_server Qwen/Qwen3-VL-2B-Instruct" in report_html
    assert "# note:" in report_html  # what a command cannot express travels with it
    assert "autotune export --study small --trial 2" in report_html
    # The infeasible trial is not offered as a configuration; its own section says why.
    top = report_html.split('id="top"', 1)[1].split("<h2 id=", 1)[0]
    assert "<td>3<" not in top
    infeasible = report_html.split("id='infeasible'", 1)[1].split("<h2", 1)[0]
    # With its speed: what the floor turned down.
    assert re.search(
        r"<td>3</td><td class='num'>352\.0</td>.*accuracy 0\.620 vs reference 0\.900", infeasible
    )


def test_reference_samples_failures_and_environment(report_html: str) -> None:
    assert "Reference: trial 0" in report_html
    assert "reference trial's answer" in report_html
    assert "INVOICE 4711" in report_html  # a sample output of the recommended trial
    assert "out of memory" in report_html  # the failed trial's reason
    assert "NVIDIA H200" in report_html
    assert "transformers_version" in report_html


def test_few_trials_and_no_feasible_trial(tmp_path: Path) -> None:
    specs = [
        Spec(_p("sdpa", None, 1), 40.0, 2000, 0.9, reference=True),
        Spec(_p("eager", 512, 4), 90.0, 2500, 0.5),
    ]
    url, _ = build_study(tmp_path, study_name="few", specs=specs)
    out = tmp_path / "few.html"
    result = CliRunner().invoke(main, ["report", "--storage", url, "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = out.read_text(encoding="utf-8")
    assert f"needs at least {MIN_IMPORTANCE_TRIALS} measured trials (2 so far)" in document
    assert "plot-importance" not in document
    assert "plot-pareto" in document


def test_best_effort_when_nothing_is_feasible(tmp_path: Path) -> None:
    # The reference failed, so no trial passes the relative floor: still a report.
    specs = [
        Spec(_p("sdpa", None, 1), 0, 0, 0, state=TrialState.FAIL, reference=True, failure="x"),
        Spec(_p("eager", 512, 4), 90.0, 2500, 0.5),
    ]
    url, _ = build_study(tmp_path, study_name="none", specs=specs)
    out = tmp_path / "none.html"
    result = CliRunner().invoke(main, ["report", "--storage", url, "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = out.read_text(encoding="utf-8")
    assert "best effort" in document
    assert "No completed reference trial" in document


def test_missing_storage_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "nope.db"
    result = CliRunner().invoke(
        main, ["report", "--storage", f"sqlite:///{db}", "--out", str(tmp_path / "r.html")]
    )
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: no study database at")
    assert len(result.output.strip().splitlines()) == 1
    assert not db.exists()
    assert not (tmp_path / "r.html").exists()


def test_unknown_study_names_the_existing_ones(
    small_study: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = small_study
    result = CliRunner().invoke(
        main, ["report", "--storage", url, "--study", "other", "--out", str(tmp_path / "r.html")]
    )
    assert result.exit_code == 2
    assert "no study 'other'" in result.output and "small" in result.output


def test_factory_specs_cover_every_state() -> None:
    # The fixture is only useful while it holds each kind of trial the report shows.
    states = {s.state for s in SPECS}
    assert states == {TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED}


def test_parameters_print_rounded_to_what_a_reader_compares() -> None:
    """A sampled float prints with 3 significant digits everywhere a trial's parameters are
    listed (best, the report, its hover text); whole numbers and names print as they are."""
    words = params_words(
        {
            "temperature": 0.7310594627360019,
            "kv_cache_fraction": 0.3,
            "batch_size": 16,
            "backend": "lmdeploy",
            "image_max_side": None,
        }
    )
    assert words == (
        "temperature=0.731 kv_cache_fraction=0.3 batch_size=16 backend=lmdeploy image_max_side=None"
    )


def _floor_study(tmp_path: Path, specs: list[Spec]) -> optuna.Study:
    url, name = build_study(tmp_path, specs=specs)
    study = optuna.load_study(study_name=name, storage=url)
    accuracy = {"enabled": True, "mode": "relative", "max_drop": MAX_DROP, "test": "bootstrap"}
    study.set_user_attr("space", {"constraints": {"accuracy": {**accuracy, "confidence": 0.9}}})
    return study


def test_the_floor_drawn_is_the_floor_applied(tmp_path: Path) -> None:
    """Trial 2 (0.86 against the reference's 0.90) sits above the drawn floor 0.85 but its
    paired interval reaches 0.84, so the floor rejected it; the chart shows that bar, and every
    bar's lower end is above the line exactly when its trial is feasible."""
    specs = [
        Spec(_p("sdpa", None, 1), 41.0, 2100, 0.90, reference=True),
        Spec(_p("sdpa", 1024, 4), 118.0, 2650, 0.90),
        Spec(_p("sdpa", 768, 16), 305.5, 4200, 0.86),
        Spec(_p("eager", 512, 16), 352.0, 3900, 0.62),
    ]
    study = _floor_study(tmp_path, specs)
    figure = accuracy_figure(collect(study))
    floor = figure.layout.shapes[0].y0
    assert floor == pytest.approx(0.90 - MAX_DROP)
    text = figure.layout.annotations[0].text
    assert "paired interval (bar; the end of a two-sided 90% interval) must clear it" in text
    seen = {}
    for trace in figure.data:
        lower = [y - down for y, down in zip(trace.y, trace.error_y.arrayminus, strict=True)]
        for number, y, low in zip(trace.customdata, trace.y, lower, strict=True):
            seen[number] = (trace.name, y, low)
    assert seen[2][0] == "infeasible" and seen[2][1] > floor > seen[2][2]
    assert seen[1][0] == "feasible" and seen[1][2] > floor
    for name, _y, low in seen.values():
        assert (name == "feasible") == (low >= floor - 1e-9)
    # Judged by points (`test: point`), the chart draws no bars.
    study.set_user_attr(
        "space",
        {"constraints": {"accuracy": {"mode": "relative", "max_drop": 0.05, "test": "point"}}},
    )
    assert not any(t.error_y.visible for t in accuracy_figure(collect(study)).data)


def test_importances_say_how_many_trials_they_rest_on(tmp_path: Path) -> None:
    url, name = build_study(tmp_path)
    imp = collect(optuna.load_study(study_name=name, storage=url)).importances
    complete = sum(s.state == TrialState.COMPLETE for s in SPECS)
    assert imp.trials == complete and imp.by_target
    assert f"from {complete} measured trials" in imp.basis and "hint" in imp.basis
    assert "hint" not in Importances(trials=FIRM_IMPORTANCE_TRIALS).basis
    assert f"{complete} trials" in importance_figure(imp).layout.title.text


def test_the_what_if_heading_names_the_reference_only_when_it_is_there(tmp_path: Path) -> None:
    url, name = build_study(tmp_path)
    study = optuna.load_study(study_name=name, storage=url)
    trials = {t.number: t for t in study.get_trials()}
    assert what_ifs_title([(trials[1], "sampled")]) == "what-ifs"
    assert what_ifs_title([(trials[0], "x"), (trials[1], "y")]) == "what-ifs and the reference"
