"""`autotune evalset needs` says how many items the sequential floor spends, and pools resolve."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autotune.checkpoints.dummy import without_accuracy
from autotune.errors import EvalsetError
from autotune.evalset.pools import ensure_pool, known_pools
from autotune.space.files import load_space


@pytest.mark.slow
def test_needs_grows_with_disagreement_and_says_what_the_set_can_decide() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "evalset", "needs", "--max-drop", "0.05",
         "--confidence", "0.95", "--evalset", "smoke", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["items"] == 240
    medians = [row["median_items"] for row in report["rows"]]
    assert medians == sorted(medians) and medians[0] < 240 < medians[-1]
    # What the held-out confirmation costs: identical answers need fewer items than differing.
    held = report["holdout_items"]
    assert 0 < held["0%"] < held["5%"]
    text = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "evalset", "needs", "--evalset", "smoke"],
        capture_output=True, text=True, timeout=300, check=False,
    ).stdout  # fmt: skip
    # 0.02 at 0.9 holds out 1,625 items by default, which 240 cannot spare: all of them search.
    assert text.rstrip().endswith(
        "smoke: 240 items let the sequential floor pass a candidate as accurate as the reference "
        "only where their answers agree on every item (9 times in 10, max_drop 0.02, "
        "confidence 0.9)"
    )
    # The 326 items such a floor holds out do not fit in 240: none are, and all 240 search.
    assert held["5%"] == 326 and report["held_out"] == 0 and report["search_items"] == 240
    assert report["reach"] == 0.02 and "up to 2% of items" in report["can_decide"]


@pytest.mark.parametrize(
    ("option", "value"),
    [("--max-drop", "nan"), ("--max-drop", "inf"), ("--max-drop", "-0.1"), ("--max-drop", "0"),
     ("--confidence", "nan"), ("--confidence", "-inf"), ("--confidence", "1")],
)  # fmt: skip
def test_a_floor_that_is_no_number_or_out_of_range_is_one_line(option: str, value: str) -> None:
    from click.testing import CliRunner

    from autotune.cli import main

    result = CliRunner().invoke(main, ["evalset", "needs", option, value])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: Invalid value for '{option}'"), lines


def test_the_default_space_judges_on_its_pool_and_dummy_weights_time_that_pool() -> None:
    """Dummy weights keep the pool: their accuracy pass answers its items, for its time
    (autotune.accuracy.timed)."""
    space = load_space("default")
    assert space.evalset in known_pools()
    assert without_accuracy(space).evalset == space.evalset


def test_an_unknown_pool_is_one_clear_error() -> None:
    with pytest.raises(EvalsetError, match="no evaluation pool named 'nope'"):
        ensure_pool("nope")
