"""Numbers out of range are refused up front, naming the field and the allowed range.

`max_measure_s: 1e300` or `workload.output_tokens: 32768` used to run until the reference trial
timed out (issue 30). Each case runs the real `autotune run` (in-process) and must end in one
`error:` line that names the field and its bound, exit 2, and nothing written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from small_space import LOOP_WORKLOAD, small_space

from autotune.cli import main

W = LOOP_WORKLOAD

LE = "Input should be less than or equal to"


def load(**values: float) -> dict[str, Any]:
    return {"workload": {**W, **values}}


SPACE_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("max_measure_s", load(max_measure_s=1e300), f"workload.max_measure_s: {LE} 86400"),
    ("output_tokens", load(output_tokens=32768), f"workload.output_tokens: {LE} 16384"),
    ("max_warmup_s", load(max_warmup_s=1e9), f"workload.max_warmup_s: {LE} 86400"),
    ("warmup_requests", load(warmup_requests=10**9), f"workload.warmup_requests: {LE} 10000"),
    ("requests", load(requests=10**9), f"workload.requests: {LE} 100000"),
    ("max_requests", load(max_requests=10**12), f"workload.max_requests: {LE} 1000000"),
    ("request_rate", load(request_rate_per_s=1e12), f"workload.request_rate_per_s: {LE} 100000"),
    ("startup_timeout", load(startup_timeout_s=1e300), f"workload.startup_timeout_s: {LE} 86400"),
    ("trial_timeout", {"trial_timeout_s": 1e300}, f"trial_timeout_s: {LE} 604800"),
    ("trials", {"trials": 10**9}, f"trials: {LE} 100000"),
    ("budget", {"budget": "1e300"}, "budget: '1e300' is more than 30 days"),
    ("budget-hours", {"budget": "100000h"}, "is more than 30 days (2592000 s)"),
    ("screening", {"screening": {"items": 10**9}}, f"screening.items: {LE} 1000000"),
    (
        "memory",
        {"constraints": {"memory_budget_mib": 1e300}},
        f"constraints.memory_budget_mib: {LE} 16777216",
    ),
    (
        "slo",
        {"constraints": {"latency_slo_ms": 1e300}},
        f"constraints.latency_slo_ms: {LE} 86400000",
    ),
    (
        "launches",
        {"launches": {"trials_per_launch": 10**9}},
        f"launches.trials_per_launch: {LE} 100000",
    ),
    ("sampler", {"sampler": {"n_startup_trials": 10**9}}, f"sampler.n_startup_trials: {LE} 100000"),
    # A floor of 0 asks every candidate to be shown better than the reference (issue 53).
    (
        "max_drop-0",
        {"constraints": {"accuracy": {"max_drop": 0}}},
        "constraints.accuracy.max_drop: Input should be greater than 0",
    ),
    (
        "holdout-items",
        {"constraints": {"accuracy": {"confirmation": {"items": 0}}}},
        "constraints.accuracy.confirmation.items: Input should be greater than or equal to 1",
    ),
    # 8 items cannot pass a candidate whose answers differ, and the space did not say that
    # identical answers are what it wants: refused with what the floor needs (issue 53).
    (
        "set-too-small",
        {
            "constraints": {
                "accuracy": {"max_drop": 0.05, "confidence": 0.95, "identical_answers_only": False}
            }
        },
        "accuracy floor: 8 items cannot pass a candidate whose answers differ from the "
        "reference's: at max_drop 0.05, confidence 0.95, one as accurate that differs on 2% of "
        "items needs 160 items to pass 9 times in 10 (`autotune evalset needs --max-drop 0.05 "
        "--confidence 0.95`)",
    ),
    # Each cap allowed alone, together past the trial's timeout: every trial would time out.
    (
        "caps-past-timeout",
        {"trial_timeout_s": 60, "workload": {**W, "max_measure_s": 50, "max_warmup_s": 20}},
        "max_warmup_s + workload.max_measure_s (70 s) must be below trial_timeout_s (60 s)",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [case[1:] for case in SPACE_CASES],
    ids=[case[0] for case in SPACE_CASES],
)
def test_space_values_out_of_range_are_refused(
    overrides: dict[str, Any], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = small_space(tmp_path, **overrides)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = CliRunner().invoke(main, ["run", "--space", str(space), "--trials", "1"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert expected in errors[0], errors[0]
    assert list(work.iterdir()) == []  # no studies/ folder, no database


OPTION_CASES = [
    (["--trials", str(10**9)], "--trials", "100000"),
    (["--timeout", "1e300"], "--timeout", "2592000"),
    (["--budget", "1e300"], "--budget", "more than 30 days"),
    (["--budget", "721h"], "--budget", "more than 30 days"),
]


@pytest.mark.parametrize(("args", "option", "bound"), OPTION_CASES)
def test_run_options_out_of_range_are_refused(
    args: list[str], option: str, bound: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = small_space(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = CliRunner().invoke(main, ["run", "--space", str(space), *args])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and option in errors[0] and bound in errors[0], result.output
    assert list(work.iterdir()) == []


def test_a_trial_number_past_sqlites_integers_is_refused(small_study: tuple[str, str]) -> None:
    url, name = small_study
    for command in ("export", "verify"):
        result = CliRunner().invoke(
            main, [command, "--study", name, "--storage", url, "--trial", str(10**30)]
        )
        assert result.exit_code == 2, result.output
        assert "--trial" in result.output and "2147483647" in result.output, result.output


def test_the_bundled_spaces_keep_their_load_inside_the_timeout() -> None:
    from autotune.space import load_space

    for name in ("default", "smoke", "smoke-swift"):
        space = load_space(name)
        caps = space.workload.max_warmup_s + space.workload.max_measure_s
        assert caps < space.trial_timeout_s, name
