"""Equal work is checked: a trial whose answers are not the forced length is recorded as unequal
work and never ranked on tokens per second; the run names the engine that ignored the forcing.

Against tests/fake_openai_server.py as an endpoint: once honest (it answers the forced length
when asked with ignore_eos), once made to ignore min_tokens / ignore_eos and answer 10 tokens
whatever is asked, as the endpoint of issue 30 did.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import optuna
import pytest
import yaml
from fake_server import FAKE
from small_space import autotune_cli, quick_space, small_evalset

from autotune.engines.server_process import free_port
from autotune.measure.equal_work import (
    FORCED_LENGTH_TOLERANCE_REL,
    forced_length_ratio,
    unequal_work,
)
from autotune.measure.lengths import AnswerLengths
from autotune.measure.timing import RequestTiming
from autotune.study.results.select import split_equal_work

FORCED = 32


def timing(tokens: int, start: float = 0.0) -> RequestTiming:
    return RequestTiming(
        start=start, first_token=start + 0.1, last_token=start + 1, end=start + 1,
        output_tokens=tokens,
    )  # fmt: skip


def test_the_ratio_compares_each_answer_with_the_length_it_was_asked_for() -> None:
    lengths = AnswerLengths(128, 0.5)
    asked = [lengths.next() for _ in range(7)]
    # Answers that did exactly what was asked, ending in any order.
    done = [timing(n, start=i) for i, n in enumerate(asked)][::-1]
    assert forced_length_ratio(done, mean=128, spread=0.5) == pytest.approx(1.0)
    assert unequal_work(1.0 + FORCED_LENGTH_TOLERANCE_REL / 2, mean=128, engine="e") is None
    ignored = [timing(10) for _ in asked]
    ratio = forced_length_ratio(ignored, mean=128, spread=0.5)
    assert ratio == pytest.approx(70 / sum(asked))
    why = unequal_work(ratio, mean=128, engine="the endpoint http://x")
    assert why is not None and why.startswith("the endpoint http://x ignored the forced")
    assert forced_length_ratio([], mean=128, spread=0.0) is None
    assert unequal_work(0.9, mean=128, engine="e") is not None  # a tenth short: unequal


def start_server(*extra: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, FAKE, "--port", str(port), "--chunk-delay", "0.002", *extra],
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            return server, port
        except httpx.HTTPError:
            if server.poll() is not None:
                raise AssertionError("the fake server did not start") from None
            time.sleep(0.05)
    raise AssertionError("the fake server did not answer")


def endpoint_study(tmp_path: Path, name: str, port: int) -> tuple[str, str]:
    folder = tmp_path / name
    folder.mkdir()
    space = quick_space(
        "smoke", folder, evalset=small_evalset(folder, n_text=4, n_shapes=2), screening_items=0,
        max_measure_s=1.5, max_warmup_s=1, output_tokens=FORCED,
    )  # fmt: skip
    data = yaml.safe_load(space.read_text(encoding="utf-8"))
    # A deploy target whose requests can force a length (ms-swift's cannot: refused with it).
    # The reference's engine as the smoke space had it before it measured through swift.
    reference = {**data["reference"], "backend": "transformers", "compile_mode": "none"}
    space.write_text(
        yaml.safe_dump({**data, "deploy": "lmdeploy", "reference": reference}), encoding="utf-8"
    )
    storage = f"sqlite:///{folder}/s.db"
    run = autotune_cli(
        "run", "--space", str(space), "--trials", "2", "--study", name, "--storage", storage,
        "--endpoint", f"http://127.0.0.1:{port}", cwd=folder, timeout=300,
    )  # fmt: skip
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    best = autotune_cli("best", "--study", name, "--storage", storage, cwd=folder, timeout=120)
    return run.stderr + f"\n[exit {run.returncode}]", best.stdout + best.stderr + (
        f"\n[exit {best.returncode}]"
    )


@pytest.mark.slow
def test_an_endpoint_that_ignores_the_forced_length_is_never_ranked(tmp_path: Path) -> None:
    honest, honest_port = start_server()
    ignoring, ignoring_port = start_server("--ignore-forcing", "10")
    try:
        with ThreadPoolExecutor(2) as pool:  # two studies side by side: each mostly waits
            fair = pool.submit(endpoint_study, tmp_path, "fair", honest_port)
            unfair = pool.submit(endpoint_study, tmp_path, "unfair", ignoring_port)
            (fair_run, fair_best), (unfair_run, unfair_best) = fair.result(), unfair.result()
    finally:
        for server in (honest, ignoring):
            server.kill()
            server.wait()

    # The honest endpoint did the forced work: ranked, recommended, no word about it.
    assert fair_run.endswith("[exit 0]"), fair_run[-3000:]
    assert "unequal work" not in fair_run and "recommended: trial" in fair_best, fair_best
    fair_study = optuna.load_study(study_name="fair", storage=f"sqlite:///{tmp_path}/fair/s.db")
    for trial in fair_study.trials:
        assert trial.user_attrs["forced_output_tokens_ratio"] == pytest.approx(1.0)
        assert "unequal_work" not in trial.user_attrs

    # The one that ignored it: each trial recorded as unequal work, the run names the endpoint,
    # and best recommends none of them on tokens/s.
    url = f"http://127.0.0.1:{ignoring_port}"
    said = [line for line in unfair_run.splitlines() if "unequal work" in line]
    assert len(said) == 2, unfair_run[-3000:]
    assert all(f"the endpoint {url} ignored the forced answer length" in line for line in said)
    assert "held 31% of the 32 tokens forced per answer" in said[0]
    unfair_study = optuna.load_study(
        study_name="unfair", storage=f"sqlite:///{tmp_path}/unfair/s.db"
    )
    for trial in unfair_study.trials:
        assert trial.user_attrs["forced_output_tokens_ratio"] == pytest.approx(10 / FORCED)
        assert "ignored the forced answer length" in trial.user_attrs["unequal_work"]
        assert trial.user_attrs["constraints"]["deployable"] == 1.0  # the sampler avoids it
        assert math.isfinite(trial.user_attrs["throughput_output_tokens_per_s"])
    assert "recommended: trial" not in unfair_best, unfair_best
    assert "did the work its load test forced" in unfair_best, unfair_best
    assert "Traceback" not in unfair_best


def test_only_the_trials_that_did_the_forced_work_are_ranked() -> None:
    def trial(number: int, **attrs: object) -> optuna.trial.FrozenTrial:
        made = optuna.trial.create_trial(values=[100.0 + number, 10.0], user_attrs=attrs)
        made.number = number
        return made

    trials = [trial(0), trial(1, unequal_work="the lmdeploy server ignored it"), trial(2)]
    equal, unequal = split_equal_work(trials)
    assert [t.number for t in equal] == [0, 2]
    assert [(t.number, why) for t, why in unequal] == [
        (1, "unequal work: the lmdeploy server ignored it")
    ]
