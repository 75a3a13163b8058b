"""`best`, its JSON and the report headline the gain over the deploy target's defaults and,
with a price, the cost per million output tokens (autotune.report.headline)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from study_factory import BASELINE_LABEL, BASELINE_SPECS, build_study

from autotune.cli import main
from autotune.report.data import collect
from autotune.report.html import render
from autotune.report.text import best_json, best_text

LABEL = BASELINE_LABEL
SPECS = BASELINE_SPECS
GAIN = "gain: 1.53× (±5%) LMDeploy's defaults (trial 2, 200.0 tok/s ±4.0%)"


@pytest.fixture
def stored(tmp_path: Path) -> tuple[str, str]:
    return build_study(tmp_path, specs=SPECS)


def load(stored: tuple[str, str]) -> optuna.Study:
    url, name = stored
    return optuna.load_study(study_name=name, storage=url)


def test_best_headlines_the_gain_and_keeps_the_reference_as_a_detail(
    stored: tuple[str, str],
) -> None:
    lines = best_text(load(stored)).splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("recommended: trial 1 — "))
    assert lines[at + 1] == f"  {GAIN}"  # right under the recommendation
    detail = next(x for x in lines if "versus the accuracy reference" in x)
    assert "the reference's 41.0 tok/s" in detail
    assert not any(x.strip().startswith("cost:") for x in lines)  # no price, none assumed
    assert "(LMDeploy's defaults)" in best_text(load(stored))  # its row in the named table


def test_a_price_gives_the_cost_per_million_tokens_of_both(stored: tuple[str, str]) -> None:
    text = best_text(load(stored), gpu_price_per_hour=3.6)
    # 305.5 tok/s: 1.0998 million tokens an hour; 200 tok/s: 0.72 million.
    assert "  cost: $3.27 per million output tokens at $3.6/h (LMDeploy's defaults: $5.00)" in (
        text.splitlines()
    )
    data = best_json(load(stored), gpu_price_per_hour=3.6)
    assert data["baseline"] == {"trial": 2, "label": LABEL}
    assert data["versus_baseline"]["times"] == pytest.approx(305.5 / 200.0)
    assert data["cost"] == {
        "gpu_price_per_hour": 3.6,
        "recommended_usd_per_million_tokens": pytest.approx(1e3 / 305.5),
        "baseline_usd_per_million_tokens": pytest.approx(5.0),
    }
    assert best_json(load(stored))["cost"] is None


def test_the_space_s_price_serves_when_no_flag_is_given(stored: tuple[str, str]) -> None:
    study = load(stored)
    study.set_user_attr("space", {"gpu_price_per_hour": 7.2})
    assert best_json(study)["cost"]["baseline_usd_per_million_tokens"] == pytest.approx(10.0)
    flagged = best_json(study, gpu_price_per_hour=3.6)["cost"]
    assert flagged["baseline_usd_per_million_tokens"] == pytest.approx(5.0)  # the flag wins


def test_the_report_states_the_gain_and_the_cost(stored: tuple[str, str]) -> None:
    document = render(collect(load(stored), gpu_price_per_hour=3.6))
    assert html.escape(GAIN) in document
    assert "$3.27 per million output tokens" in document


def test_a_study_without_the_baseline_says_so(tmp_path: Path) -> None:
    url, name = build_study(tmp_path, specs=SPECS[:2])
    study = optuna.load_study(study_name=name, storage=url)
    assert "  gain: no baseline measured (the deploy target's defaults)" in best_text(study)
    assert best_json(study)["versus_baseline"] is None


def test_best_and_report_take_the_price_on_their_command_line(stored: tuple[str, str]) -> None:
    url, name = stored
    args = ["best", "--study", name, "--storage", url, "--json"]
    result = CliRunner().invoke(main, [*args, "--gpu-price-per-hour", "3.6"])
    assert result.exit_code == 0, result.output
    cost = json.loads(result.output)["cost"]
    assert cost["recommended_usd_per_million_tokens"] == pytest.approx(1e3 / 305.5)
    refused = CliRunner().invoke(main, [*args, "--gpu-price-per-hour", "-1"])
    assert refused.exit_code != 0
    assert "--gpu-price-per-hour" in refused.output and "Traceback" not in refused.output
    out = Path(url.removeprefix("sqlite:///")).parent / "r.html"
    where = ["--study", name, "--storage", url, "--out", str(out)]
    written = CliRunner().invoke(main, ["report", *where, "--gpu-price-per-hour", "3.6"])
    assert written.exit_code == 0, written.output
    assert "$3.27 per million output tokens" in out.read_text(encoding="utf-8")
