"""`autotune eval`: how a user writes a --param value (full size included), its limit and its
progress."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_endpoint import fake_endpoint
from small_space import autotune_cli, quick_space, small_evalset

from autotune.cli import main
from autotune.errors import SpaceError
from autotune.evaluate import EvalProgress, configured, parse_overrides, with_timeout
from autotune.params import TrialConfig
from autotune.space.files import load_space


def test_full_size_is_written_null_or_none() -> None:
    for raw in ("null", "None", "~", ""):
        overrides = parse_overrides([f"image_max_side={raw}"])
        assert overrides == {"image_max_side": None}, raw
        assert configured(TrialConfig(image_max_side=256), overrides).image_max_side is None


@pytest.mark.parametrize("raw", ["full", "none", "0"])
def test_a_side_that_is_no_size_says_how_to_write_full_size(raw: str) -> None:
    with pytest.raises(SpaceError, match=r"full size is image_max_side=null \(or None\)$"):
        configured(TrialConfig(image_max_side=256), parse_overrides([f"image_max_side={raw}"]))


def test_eval_help_shows_how_to_write_full_size() -> None:
    # --help is where a user looks first; click wraps it, so compare the words, not the lines.
    result = CliRunner().invoke(main, ["eval", "--help"])
    assert result.exit_code == 0, result.output
    assert "full size is image_max_side=null (or None)" in " ".join(result.output.split())


def test_lowercase_none_stays_a_word() -> None:
    # compile_mode, weight_quant and kv_quant take "none" as a value, not as null.
    assert parse_overrides(["compile_mode=none"]) == {"compile_mode": "none"}
    assert configured(TrialConfig(), parse_overrides(["weight_quant=none"])).weight_quant == "none"


def test_a_limit_inside_the_load_test_is_refused_before_anything_starts() -> None:
    space = load_space("smoke")
    caps = space.workload.max_warmup_s + space.workload.max_measure_s
    with pytest.raises(SpaceError, match=r"--timeout-s .*: the load test alone may take"):
        with_timeout(space, caps)
    assert with_timeout(space, caps + 1).trial_timeout_s == caps + 1
    assert with_timeout(space, None) is space


def test_progress_says_each_phase_and_speaks_up_when_nothing_happens() -> None:
    stream = io.StringIO()
    with EvalProgress(120, every_s=0.1, stream=stream) as progress:
        time.sleep(0.45)  # silence: the heartbeat's lines
        progress("accuracy: 4/8 items")
    lines = stream.getvalue().splitlines()
    assert len([line for line in lines if line.startswith("eval: still starting (")]) >= 2
    assert lines[-1].startswith("eval: accuracy: 4/8 items (0 s;")
    assert all(line.endswith("it times out after 120 s: --timeout-s)") for line in lines)


@pytest.mark.slow
def test_eval_reports_the_items_answered_and_takes_its_limit(tmp_path: Path) -> None:
    """The real command on the bundled model: the accuracy pass's items as they are answered,
    each line with its elapsed seconds and the limit given."""
    space = quick_space(
        "smoke", tmp_path, evalset=small_evalset(tmp_path), max_measure_s=1.5, max_warmup_s=1
    )
    done = autotune_cli(
        "eval", "--space", str(space), "--timeout-s", "600", "--json", cwd=tmp_path, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["items"] == 8
    counts = re.findall(
        r"^eval: accuracy: (\d+)/8 items \(\d+ s; it times out after 600 s", done.stderr, re.M
    )
    assert counts and counts == sorted(counts, key=int) and counts[-1] == "8", done.stderr


@pytest.mark.slow
def test_a_measurement_past_its_limit_names_the_option(tmp_path: Path) -> None:
    # One second: the worker's own start-up (interpreter, torch, the model) takes longer.
    space = quick_space(
        "smoke", tmp_path, evalset=small_evalset(tmp_path), max_measure_s=0.3, max_warmup_s=0.2
    )
    done = autotune_cli(
        "eval", "--space", str(space), "--timeout-s", "1", cwd=tmp_path, timeout=300
    )
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the configuration could not be measured: timeout: timed out")
    assert last.endswith("; --timeout-s SECONDS gives it longer"), last


@pytest.mark.slow
def test_eval_through_a_server_counts_its_answers_as_they_arrive(tmp_path: Path) -> None:
    """The same progress through a server's client (the fake OpenAI server as an endpoint):
    its answers are counted one by one, not a batch at a time."""
    space = quick_space("smoke", tmp_path, evalset=small_evalset(tmp_path), max_measure_s=2)
    with fake_endpoint() as url:
        done = autotune_cli("eval", "--space", str(space), "--endpoint", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = re.findall(r"^eval: accuracy: (\d+)/8 items \(", done.stderr, re.M)
    assert counts == [str(n) for n in range(1, 9)], done.stderr
