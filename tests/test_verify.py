"""Verify's verdicts: a figure outside its band is a miss, above or below (two-sided, the
default), or only on the worse side (--one-sided); the output says which rule it applied."""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import scipy.stats  # noqa: F401  (loaded before any load test here: see the first test below)
from click.testing import CliRunner
from fake_server import FAKE
from small_space import autotune_cli, quick_space, small_evalset

from autotune.cli import main
from autotune.engines.server_process import free_port
from autotune.verify import THROUGHPUT, accuracy_check, speed_check, with_intervals


@pytest.mark.parametrize(
    ("metric", "recorded", "measured", "two_sided", "one_sided"),
    [
        (THROUGHPUT, 100.0, 76.0, True, True),  # 24% lower: within 25%
        (THROUGHPUT, 100.0, 74.0, False, False),  # slower: a miss either way
        (THROUGHPUT, 100.0, 124.0, True, True),
        (THROUGHPUT, 100.0, 300.0, False, True),  # faster: a miss unless one-sided
        ("e2e_latency_p95_ms", 200.0, 249.0, True, True),
        ("e2e_latency_p95_ms", 200.0, 251.0, False, False),
        ("e2e_latency_p95_ms", 200.0, 20.0, False, True),
    ],
)
def test_speed_check_is_two_sided_unless_asked(
    metric: str, recorded: float, measured: float, two_sided: bool, one_sided: bool
) -> None:
    both = speed_check(metric, recorded, measured, 0.25)
    worse_only = speed_check(metric, recorded, measured, 0.25, one_sided=True)
    assert (both.passed, worse_only.passed) == (two_sided, one_sided)
    if not both.passed:
        assert both.miss == ("above" if measured > recorded else "below")


def test_the_band_is_the_recorded_interval_widened_by_the_tolerance() -> None:
    # The figures: 3.08 tok/s recorded at ±69.8%, 11.1 measured on a relaunch.
    check = speed_check(THROUGHPUT, 3.08, 11.1, 0.25, interval_rel=0.698)
    assert check.low == pytest.approx(3.08 * 0.052) and check.high == pytest.approx(3.08 * 1.948)
    assert check.passed is False and check.miss == "above"
    assert "69.8% interval + 25%" in check.rule
    # Inside the interval but beyond the tolerance alone: the interval counts.
    assert speed_check(THROUGHPUT, 100.0, 140.0, 0.25, interval_rel=0.2).passed
    # No recorded interval: the tolerance alone.
    assert not speed_check(THROUGHPUT, 100.0, 140.0, 0.25, interval_rel=math.nan).passed
    one = speed_check(THROUGHPUT, 3.08, 11.1, 0.25, interval_rel=0.698, one_sided=True)
    assert one.passed and one.high is None


@pytest.mark.parametrize("recorded", [None, 0.0, math.nan])
def test_speed_check_without_a_usable_record_is_not_judged(recorded: float | None) -> None:
    check = speed_check("ttft_p50_ms", recorded, 10.0, 0.25)
    assert check.passed is None and check.rule == "not comparable"


def test_accuracy_is_judged_within_max_drop() -> None:
    assert accuracy_check(0.80, 0.75, 0.05).passed
    assert not accuracy_check(0.80, 0.74, 0.05).passed
    higher = accuracy_check(0.80, 0.95, 0.05)
    assert not higher.passed and higher.miss == "above"
    assert accuracy_check(0.80, 0.95, 0.05, one_sided=True).passed


def test_verify_says_whether_the_recorded_interval_covers_the_relaunch() -> None:
    recorded = {THROUGHPUT: 1000.0, "throughput_ci_rel": 0.03}
    inside = {THROUGHPUT: 980.0, "throughput_ci_rel": 0.02}
    outside = {THROUGHPUT: 900.0, "throughput_ci_rel": 0.02}
    check = with_intervals(speed_check(THROUGHPUT, 1000.0, 980.0, 0.05), recorded.get, inside.get)
    assert check.recorded_interval == pytest.approx((970.0, 1030.0))
    assert check.measured_interval == pytest.approx((960.4, 999.6))
    assert check.covered is True and check.passed is True
    missed = with_intervals(speed_check(THROUGHPUT, 1000.0, 900.0, 0.05), recorded.get, outside.get)
    assert missed.covered is False and missed.passed is False
    # A trial that recorded no interval (too short) cannot be said to cover anything.
    alone = {THROUGHPUT: 1.0}
    bare = with_intervals(speed_check(THROUGHPUT, 1000.0, 980.0, 0.05), alone.get, inside.get)
    assert bare.recorded_interval is None and bare.covered is None


@pytest.mark.parametrize(("arrivals", "latency_band_rel"), [(None, 0.12 + 0.05), (20.0, 0.05)])
def test_closed_loop_latencies_carry_the_throughput_interval(
    arrivals: float | None, latency_band_rel: float
) -> None:
    """Issue 42's relaunch: 11.3% slower (inside throughput's band), so its latencies at 64 in
    flight were 11.7% and 19% longer, and failed a band of the tolerance alone. Under a closed
    loop a latency moves as one over the rate, so it carries the same interval; under
    open-loop arrivals it does not."""
    from optuna.trial import create_trial

    from autotune.engines.measurement import Measurement
    from autotune.params import TrialConfig
    from autotune.space import load_space
    from autotune.verify import compare

    space = load_space("default")
    space.workload.request_rate_per_s = arrivals
    recorded = {THROUGHPUT: 2920.8, "throughput_ci_rel": 0.12, P50: 2817.0, P95: 3620.0}
    trial = create_trial(values=[2920.8], user_attrs=recorded)
    relaunch = {THROUGHPUT: 2589.9, "throughput_ci_rel": 0.12, P50: 3147.0, P95: 4307.0}
    m = Measurement(TrialConfig(), relaunch, None, {}, "none")
    checks = {c.metric: c for c in compare(trial, m, space, 0.05)}
    assert checks[THROUGHPUT].passed
    for metric in (P50, P95):
        assert checks[metric].high == pytest.approx(recorded[metric] * (1 + latency_band_rel))
    assert checks[P50].passed is (arrivals is None)
    assert checks[P95].passed is False  # +19%: beyond even 12% + 5%


# --- a real study through a (fake) server, verified against faster and slower servers --------

# Seconds per streamed word (an answer is five): the study's server, one ten times faster and
# one three times slower. The median latency moves with the pace far beyond its band (+-25%),
# whatever load the machine carries.
RECORDED_PACE, FAST_PACE, SLOW_PACE = 0.05, 0.005, 0.15
P50 = "e2e_latency_p50_ms"
P95 = "e2e_latency_p95_ms"


def _serve(pace: float) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, FAKE, "--port", str(port), "--model", "verify-model",
         "--chunk-delay", str(pace)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=1, trust_env=False).is_success:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the fake server on port {port} never answered")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A one-trial endpoint study recorded against the first server; the URLs of all three."""
    tmp = tmp_path_factory.mktemp("verify")
    paces = {"recorded": RECORDED_PACE, "fast": FAST_PACE, "slow": SLOW_PACE}
    started = {name: _serve(pace) for name, pace in paces.items()}
    try:
        # Sixteen requests at most (the cap on seconds is not reached), two items to answer:
        # four, all in flight at once, ended before the fast server's load window opened.
        space = quick_space(
            "smoke",
            tmp,
            evalset=small_evalset(tmp, n_text=1, n_shapes=1),
            screening_items=0,
            warmup_requests=1,
            requests=8,
            max_requests=16,
            max_measure_s=8,
            max_warmup_s=1,
        )
        storage = f"sqlite:///{tmp}/v.db"
        run = autotune_cli(
            "run", "--space", str(space), "--trials", "1", "--study", "v", "--storage", storage,
            "--endpoint", started["recorded"][1], cwd=tmp,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        yield {"storage": storage, **{name: url for name, (_, url) in started.items()}}
    finally:
        for proc, _ in started.values():
            proc.kill()
            proc.wait()


def _verify(servers: dict[str, str], which: str, *extra: str) -> tuple[int, str]:
    args = ["verify", "--study", "v", "--storage", servers["storage"], "--endpoint", servers[which]]
    result = CliRunner().invoke(main, [*args, *extra], catch_exceptions=False)
    return result.exit_code, result.stdout


def _check(report: dict, metric: str) -> dict:
    checks = [c for c in report["checks"] if c["metric"] == metric]
    assert checks, f"verify checked no {metric}: {report.get('failure')}"
    return checks[0]


# A server's pace shows only while the machine lets it: beside two CPU hogs and a busy test
# run, a load spike once slowed the fast server past the recorded figure (CI run 8). Its
# verify is measured again, up to three times, until the median shows its pace; the verdict
# on that measurement is what is asserted.
PACE_TRIES = 3


def _verify_at_pace(servers: dict[str, str], which: str, *extra: str) -> tuple[int, str]:
    side = {"fast": "below", "slow": "above"}[which]
    wrong = {"below": "above", "above": "below"}[side]
    for _ in range(PACE_TRIES):
        code, text = _verify(servers, which, *extra)
        if "--json" in extra and json.loads(text).get("failure"):
            # A relaunch whose load failed (four requests of the fast server can end inside one
            # scheduling hiccup, before its window opens) has no median to judge: again.
            continue
        said = _check(json.loads(text), P50)["miss"] if "--json" in extra else _side_said(text)
        # One-sided, a better median is no miss: its pace shows as no miss on the worse side.
        if said == side or ("--one-sided" in extra and side == "below" and said != wrong):
            break
    return code, text


def _side_said(text: str) -> str | None:
    """Which side of its band the text says the median left ('below', 'above'), or None."""
    for side in ("below", "above"):
        if f"{P50} {side} its band" in text:
            return side
    return None


@pytest.mark.slow
def test_the_same_server_passes_both_ways(servers: dict[str, str]) -> None:
    # 100% of tolerance: this is about the rule, not about how closely two loads of a busy
    # machine agree (a faster or slower server misses by far more, below).
    code, text = _verify(servers, "recorded", "--tolerance", "1.0")
    assert code == 0 and "rule: two-sided" in text and text.rstrip().endswith("PASS"), text
    # The study ran in a fresh process; this process has scipy loaded already. Their medians
    # agree within 2x on one machine: when the stop rule imported scipy at its first check, the
    # event loop stalled for seconds and the fresh process recorded 13x this one's figure.
    code, text = _verify(servers, "recorded", "--tolerance", "1.0", "--json")
    p50 = _check(json.loads(text), P50)
    assert 0.5 < p50["measured"] / p50["recorded"] < 2, p50


def test_a_server_faster_than_recorded_is_a_miss_unless_one_sided(servers: dict[str, str]) -> None:
    code, text = _verify_at_pace(servers, "fast", "--json")
    report = json.loads(text)
    assert code == 1 and not report["passed"], text
    assert report["rule"] == "two-sided" and report["tolerance"] == 0.25
    assert _check(report, P50)["miss"] == "below"
    code, text = _verify_at_pace(servers, "fast")
    assert code == 1
    assert "rule: two-sided" in text and "above or below, is a miss" in text
    assert f"{P50} below its band" in text and "better than recorded" in text
    code, text = _verify_at_pace(servers, "fast", "--one-sided")
    assert code == 0, text
    assert "rule: one-sided (--one-sided)" in text and text.rstrip().endswith("PASS")


@pytest.mark.slow
def test_a_server_slower_than_recorded_is_a_miss_either_way(servers: dict[str, str]) -> None:
    for extra in ((), ("--one-sided",)):
        code, text = _verify_at_pace(servers, "slow", *extra)
        assert code == 1, text
        assert f"{P50} above its band" in text and "worse than recorded" in text


# --- a miss beside another load: the bundled model through swift deploy --------------------


def _rewrite_trial(db: Path, number: int, **values: object) -> None:
    """Store `values` on finished trial `number` as JSON (Optuna writes no finished trial):
    the record of a trial measured under another load, read back by the real verify."""
    with sqlite3.connect(db) as connection:
        (trial_id,) = connection.execute(
            "SELECT trial_id FROM trials WHERE number = ?", (number,)
        ).fetchone()
        for key, value in values.items():
            connection.execute(
                "UPDATE trial_user_attributes SET value_json = ? WHERE trial_id = ? AND key = ?",
                (json.dumps(value), trial_id, key),
            )


@pytest.mark.slow
def test_a_miss_beside_another_load_says_so_and_offers_to_measure_again(tmp_path: Path) -> None:
    """Issue 56: a relaunch measured beside a test suite missed its band with no word about
    the machine. The trial's record says its engine waited 97% of its runnable time for a
    core while no task on the machine waited at all (a load no relaunch meets: an engine
    running its load test that waits 87% or more makes some task wait far more than 10% of
    the time), and a median latency a hundredth of its own, so the relaunch misses whatever
    the machine does. Verify names the load change and the command that measures again."""
    from autotune.engines.conditions import LOAD_CHANGE
    from autotune.records.stored import TrialRecord
    from autotune.study.store.storage import load_study

    space = quick_space(
        "smoke-swift", tmp_path, evalset=small_evalset(tmp_path, n_text=1, n_shapes=1)
    )
    db = tmp_path / "l.db"
    storage = f"sqlite:///{db}"
    run = autotune_cli(
        "run", "--space", str(space), "--trials", "1", "--study", "l", "--storage", storage,
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    record = TrialRecord.of(load_study("l", storage).trials[0])
    p50 = record.figure(P50)
    assert p50 is not None and record.environment.engine_wait_share is not None
    environment = record.environment.stored()
    environment.update(engine_wait_share=0.97, cpu_pressure_share=0.0)
    _rewrite_trial(db, 0, environment=environment, **{P50: p50 / 100})

    result = CliRunner().invoke(
        main, ["verify", "--study", "l", "--storage", storage, "--trial", "0", "--json"],
        catch_exceptions=False,
    )  # fmt: skip
    report = json.loads(result.stdout)
    assert report["failure"] is None, report["failure"]
    assert result.exit_code == 1 and not report["passed"]
    assert _check(report, P50)["miss"] == "above"
    recorded, measured = report["recorded_load"], report["measured_load"]
    assert recorded["engine_wait_share"] == 0.97
    shares = [name for name in ("engine_wait_share", "cpu_pressure_share") if name in measured]
    moved = [name for name in shares if abs(measured[name] - recorded[name]) >= LOAD_CHANGE]
    assert moved, (recorded, measured)  # the relaunch's own load, read from the kernel
    said = " ".join(" ".join(report["notes"]).split())
    assert "the miss coincides with another load on the machine (" in said, said
    assert "measure again when the load is as it was: autotune verify --study l --trial 0" in said

    result = CliRunner().invoke(
        main, ["verify", "--study", "l", "--storage", storage, "--trial", "0"],
        catch_exceptions=False,
    )  # fmt: skip
    text = " ".join(result.stdout.split())  # the console wraps long lines
    assert result.exit_code == 1 and result.stdout.rstrip().splitlines()[-1].startswith("FAIL")
    assert "load: recorded the engine waited 97% of its runnable time for a core" in text
    assert "the miss coincides with another load on the machine" in text
