"""No measurement without tokens, through a real study: a server that streams no token, or a load
stopped before any of its tokens arrived (its rate never settled within its cap), fails its
trial (failure_kind no-tokens, with the reason), never stores a throughput. The
steady state racing's check weighs is the one the figures are read from."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import optuna
import pytest
from fake_endpoint import fake_endpoint
from optuna.trial import TrialState
from small_space import autotune_cli, quick_space, small_evalset
from synthetic_load import capped_batch_one_load

from autotune.errors import TrialFailure
from autotune.measure.summary import NO_TOKENS, load_state, summarize
from autotune.measure.timing import RequestTiming


def test_the_load_state_is_the_one_the_throughput_figure_is_read_from() -> None:
    rng = np.random.default_rng(3)
    timings, at = [], 0.0
    while at < 10.0:
        e2e = 0.25 * (1 + 0.2 * float(rng.standard_normal()))
        timings.append(RequestTiming(at, at + 0.02, at + e2e, at + e2e, 20))
        at += e2e
    state = load_state(timings, load_start=0.0, load_stop=at, min_warmup_s=0.25)
    figures = summarize(timings, load_start=0.0, load_stop=at, min_warmup_s=0.25)
    assert state is not None and state.settled and state.batches >= 4
    assert state.tokens_per_s == figures["throughput_output_tokens_per_s"]
    assert state.ci_rel == figures["throughput_ci_within_rel"]
    assert load_state([], load_start=0.0, load_stop=1.0) is None  # no load, no state


def endpoint_study(
    tmp_path: Path, fake_args: tuple[str, ...], **workload: float
) -> tuple[subprocess.CompletedProcess[str], str, optuna.trial.FrozenTrial]:
    """`autotune run` of a short smoke study against the fake server started with
    `fake_args`: the run, its storage URL and its first trial (the reference)."""
    space = quick_space(
        "smoke", tmp_path, evalset=small_evalset(tmp_path), screening_items=0,
        max_measure_s=1.5, max_warmup_s=0.5, **workload,
    )  # fmt: skip
    storage = f"sqlite:///{tmp_path}/s.db"
    with fake_endpoint(*fake_args) as url:
        done = autotune_cli(
            "run", "--space", str(space), "--study", "s", "--storage", storage,
            "--endpoint", url, "--trials", "2", cwd=tmp_path, timeout=600,
        )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    study = optuna.load_study(study_name="s", storage=storage)
    trials = study.get_trials(deepcopy=False)
    assert trials, done.stderr
    assert not [t for t in trials if t.state == TrialState.COMPLETE], done.stderr
    return done, storage, trials[0]


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("error: ")]


@pytest.mark.slow
def test_a_server_that_streams_no_token_fails_its_trial(tmp_path: Path) -> None:
    done, _, reference = endpoint_study(tmp_path, ("--answer", "", "--no-usage"))
    assert reference.state == TrialState.FAIL
    assert reference.user_attrs["failure_kind"] == NO_TOKENS
    assert "counted no output token" in reference.user_attrs["failure_reason"]
    assert "throughput_output_tokens_per_s" not in reference.user_attrs
    # The reference the floor needs failed: the run says why in one line and stops.
    assert done.returncode == 2
    errors = error_lines(done)
    assert len(errors) == 1 and "counted no output token" in errors[0], done.stderr


@pytest.mark.slow
def test_a_load_stopped_before_its_first_token_fails_its_trial_never_settled(
    tmp_path: Path,
) -> None:
    """An offered load sent in a burst (100 requests/s, its few requests sent within about
    0.2 s) to a server whose first token comes after 0.6 s: the load stops when its last
    request is sent, before any token, so every token arrives while it drains. No rate
    settled within the load: a failed measurement."""
    done, storage, reference = endpoint_study(
        tmp_path, ("--chunk-delay", "0.6"), request_rate_per_s=100.0
    )
    assert reference.state == TrialState.FAIL, done.stderr[-3000:]
    reason = reference.user_attrs["failure_reason"]
    assert reference.user_attrs["failure_kind"] == NO_TOKENS, reason
    assert "rate never settled within its cap" in reason and "arrived inside it" in reason
    assert "throughput_output_tokens_per_s" not in reference.user_attrs
    assert done.returncode == 2
    errors = error_lines(done)
    assert len(errors) == 1 and "never settled within its cap" in errors[0], done.stderr
    # `best` shows the trial as failed with its reason, never as a measured figure.
    shown = autotune_cli("best", "--study", "s", "--storage", storage, cwd=tmp_path)
    said = shown.stdout + shown.stderr
    assert "Traceback" not in said and "tok/s" not in said, said
    assert shown.returncode == 2 and "study 's': no trial completed" in shown.stdout, said
    assert error_lines(shown) == ["error: study 's' has no completed trial: each failed"], said
    assert "trial 0 FAIL: the load test's rate never settled within its cap" in said, said


def test_a_capped_context_only_load_without_a_window_is_read_after_its_first_request() -> None:
    """The reference only the "x" figure reads: a warm-up of four requests (the default
    space's) outlasts its three, so no steady window; its rate is the tokens after the first
    request over that span, with no interval, and the latencies are its requests' as usual."""
    load = capped_batch_one_load(context_only=True)
    timings, stop = load.timings, load.load_stop
    # The warm-up floor the load records: until its 4th request ended, capped at its last.
    kwargs = {"load_start": 0.0, "load_stop": stop, "min_warmup_s": load.min_warmup_s}
    assert load_state(timings, ended=True, **kwargs) is None
    figures = summarize(timings, context_only=True, **kwargs)
    rate = figures["throughput_output_tokens_per_s"]
    assert rate == pytest.approx(256 / 14.4, rel=0.01)  # the 2nd and 3rd requests' tokens
    assert rate == pytest.approx(128 / 7.2, rel=0.01)
    assert math.isnan(figures["throughput_ci_rel"]) and math.isnan(
        figures["throughput_ci_within_rel"]
    )
    assert figures["warmup_settled"] == 0.0 and figures["throughput_window"] == 0.0
    assert figures["load_warmup_s"] == pytest.approx(7.4)
    assert figures["measured_requests"] == 2.0 and figures["load_requests"] == 3.0
    assert figures["e2e_latency_p50_ms"] == pytest.approx(7200)
    assert figures["measured_output_tokens"] == pytest.approx(256, abs=1)
    # Any other trial keeps the rule: no steady window, no measurement. The reason says what
    # happened: its tokens arrived inside the load, which was too short for a window.
    with pytest.raises(TrialFailure) as caught:
        summarize(timings, **kwargs)
    reason = caught.value.reason
    assert caught.value.kind == NO_TOKENS
    assert "too short for a warm-up and a steady window: 3 requests in 21.80 s" in reason
    assert "drained" not in reason and "before any" not in reason
    # One request alone leaves nothing after it: the reference fails as before.
    with pytest.raises(TrialFailure) as caught:
        summarize(timings[:1], context_only=True, load_start=0.0, load_stop=7.4, min_warmup_s=7.4)
    assert caught.value.kind == NO_TOKENS


def test_a_context_only_load_with_a_window_is_measured_as_any_other() -> None:
    """The fallback is only for a load without a window: with one, the figures are the same."""
    load = capped_batch_one_load(context_only=True)
    timings, stop = load.timings, load.load_stop
    kwargs = {"load_start": 0.0, "load_stop": stop, "min_warmup_s": timings[1].end}
    assert summarize(timings, context_only=True, **kwargs) == pytest.approx(
        summarize(timings, **kwargs), nan_ok=True
    )
