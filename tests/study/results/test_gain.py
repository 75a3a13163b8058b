"""The recommendation's gain over the deploy target's defaults, and the cost per million
output tokens (autotune.study.results.gain), on a study built with Optuna in milliseconds."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from study_factory import BASELINE_LABEL, BASELINE_SPECS, build_study

from autotune.study.results.gain import (
    baseline_trial,
    cost_per_million_tokens,
    cost_words,
    gain_over_baseline,
    throughput_ratio,
    trial_cost,
)
from autotune.study.results.progress import best_so_far

LABEL = BASELINE_LABEL
SPECS = BASELINE_SPECS


@pytest.fixture
def study(tmp_path: Path) -> optuna.Study:
    url, name = build_study(tmp_path, specs=SPECS)
    return optuna.load_study(study_name=name, storage=url)


def test_the_gain_is_the_ratio_with_both_intervals_in_quadrature(study: optuna.Study) -> None:
    base = baseline_trial(study)
    assert base is not None and base.number == 2
    gain = gain_over_baseline(study.trials[1], base)
    assert gain is not None
    assert gain.times == pytest.approx(305.5 / 200.0)
    # Two independent intervals: on the log scale their half-widths add in quadrature.
    expected = math.expm1(math.hypot(math.log1p(0.03), math.log1p(0.04)))
    assert gain.ci_rel == pytest.approx(expected)
    assert gain.words() == "1.53× (±5%) LMDeploy's defaults"
    assert gain.detail() == "trial 2, 200.0 tok/s ±4.0%"
    assert gain.to_dict()["baseline_trial"] == 2


def test_no_gain_for_the_baseline_itself_or_without_one(study: optuna.Study) -> None:
    base = baseline_trial(study)
    assert gain_over_baseline(base, base) is None  # type: ignore[arg-type]
    assert gain_over_baseline(study.trials[1], None) is None


def test_a_figure_without_an_interval_gives_a_gain_without_one(tmp_path: Path) -> None:
    # The tuned trial as recorded by a load too short for an interval.
    specs = [SPECS[0], replace(SPECS[1], ci_rel=None), SPECS[2]]
    url, name = build_study(tmp_path, specs=specs)
    study = optuna.load_study(study_name=name, storage=url)
    ratio = throughput_ratio(study.trials[1], study.trials[2])
    assert ratio is not None and ratio[1] is None
    gain = gain_over_baseline(study.trials[1], baseline_trial(study))
    assert gain is not None and gain.words() == "1.53× (no interval) LMDeploy's defaults"


def test_a_study_without_the_baseline_measured_has_none(tmp_path: Path) -> None:
    url, name = build_study(tmp_path, specs=SPECS[:2])
    assert baseline_trial(optuna.load_study(study_name=name, storage=url)) is None


def test_cost_per_million_output_tokens() -> None:
    # 1,000 tok/s for an hour is 3.6 million tokens: $3.60 an hour is $1 per million.
    assert cost_per_million_tokens(1000.0, 3.6) == pytest.approx(1.0)
    assert cost_per_million_tokens(2718.0, 2.5) == pytest.approx(2.5 / (2718 * 3600) * 1e6)
    assert cost_per_million_tokens(1000.0, None) is None  # no price is assumed
    assert cost_per_million_tokens(0.0, 3.6) is None
    assert cost_per_million_tokens(math.nan, 3.6) is None
    assert cost_words(1.0) == "$1.00 per million output tokens"
    assert cost_words(0.00123) == "$0.00123 per million output tokens"


def test_a_trial_s_cost_reads_its_throughput(study: optuna.Study) -> None:
    assert trial_cost(study.trials[2], 3.6) == pytest.approx(3.6 / (200.0 * 3600) * 1e6)
    assert trial_cost(None, 3.6) is None


def test_the_progress_line_carries_the_gain(study: optuna.Study) -> None:
    line = best_so_far(study)
    assert line.startswith("best: trial 1 (305.5 tok/s")
    assert line.endswith(", 1.53× (±5%) LMDeploy's defaults)")


def test_a_baseline_its_cap_stopped_gives_the_gain_an_interval(tmp_path: Path) -> None:
    """An H100 study's baseline (LMDeploy's defaults) reached its measuring cap with two long
    batches and no interval, and `best` printed "1.19× (no interval)". Its figures now take
    shorter batches from the same window (autotune.measure.steady): the baseline's load of
    slow requests, stopped 40 s in, has an interval, and so has the gain."""
    from autotune.measure.summary import summarize
    from autotune.measure.timing import RequestTiming

    # 64 lanes, each request 5 s long streaming 100 tokens: batches of two turnovers are 10 s.
    timings = []
    for lane in range(64):
        for k in range(8):
            start = k * 5.0 + lane * 5.0 / 64
            chunks = tuple(start + (i + 1) * 0.05 for i in range(100))
            timings.append(
                RequestTiming(
                    start=start,
                    first_token=chunks[0],
                    last_token=chunks[-1],
                    end=chunks[-1],
                    output_tokens=100,
                    chunk_times=chunks,
                )
            )
    figures = summarize(timings, load_start=0.0, load_stop=40.0, min_warmup_s=10.0)
    assert figures["throughput_batch_s"] < 10.0  # shorter than the two turnovers it asked
    base_rel = figures["throughput_ci_rel"]
    assert math.isfinite(base_rel)
    specs = [SPECS[0], SPECS[1], replace(SPECS[2], ci_rel=base_rel)]
    url, name = build_study(tmp_path, specs=specs)
    study = optuna.load_study(study_name=name, storage=url)
    gain = gain_over_baseline(study.trials[1], baseline_trial(study))
    assert gain is not None and gain.ci_rel is not None
    assert gain.words() == f"1.53× (±{gain.ci_rel:.0%}) LMDeploy's defaults"
