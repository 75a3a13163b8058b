"""What a set can decide: a study's warning and `autotune evalset needs` say one thing."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from autotune.accuracy.floor import floor_warning
from autotune.accuracy.reach import items_to_pass, needs_rows, set_reach
from autotune.cli import main
from autotune.space import Constraints
from autotune.space.files import load_space


def _needs_sentence(command: str) -> str:
    """What `command` (an `autotune evalset needs ...` line) prints of the set, run for real."""
    args = command.split()
    assert args[:3] == ["autotune", "evalset", "needs"], command
    result = CliRunner().invoke(main, args[1:])
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    return last.split(": ", 1)[1]


@pytest.mark.parametrize(
    ("constraints", "figure"),
    [
        # The smoke space: 99 of 240 items held out, the search floor's 141 pass identical
        # answers only (over all 240, answers differing on 2% would pass: the old warning).
        (load_space("smoke").constraints, "only where their answers agree on every item"),
        # A floor whose confirmation does not fit in 240 items: all of them search.
        (
            Constraints.model_validate({"accuracy": {"max_drop": 0.05, "confidence": 0.95}}),
            "differ on up to 2% of items",
        ),
    ],
)
def test_the_warning_names_a_command_that_prints_its_own_figure(
    constraints: Constraints, figure: str
) -> None:
    warning = floor_warning(240, 0.5, constraints, evalset="smoke")
    assert warning is not None
    command = re.search(r"`(autotune evalset needs [^`]+)`", warning)
    assert command is not None, warning
    sentence = _needs_sentence(command.group(1))
    assert figure in sentence
    assert f"accuracy floor: {sentence};" in warning


def test_the_held_out_slice_is_not_counted_for_the_search() -> None:
    whole = set_reach(240, max_drop=0.05, confidence=0.95, held_out=0)
    searched = set_reach(240, max_drop=0.05, confidence=0.95, held_out=99)
    assert (whole.reach, searched.reach) == (0.02, 0.0)
    assert searched.search_items == 141 and "the other 141 let" in searched.sentence()
    # A slice that leaves nothing to search is no slice, as a study holds out none then.
    assert set_reach(240, max_drop=0.05, confidence=0.95, held_out=240).held_out == 0


def test_reach_is_the_last_row_of_the_table_the_set_covers() -> None:
    rows = needs_rows(0.05, 0.95)
    for items in (50, 100, 200, 600, 1000):
        covered = [r["discordance"] for r in rows if r["items_for_90pct"] <= items]
        assert set_reach(items, max_drop=0.05, confidence=0.95, held_out=0).reach == (
            covered[-1] if covered else None
        )
    assert items_to_pass(0.05, 0.95, 0.0)[1] == rows[0]["items_for_90pct"]


def test_too_few_items_for_even_identical_answers_say_so() -> None:
    reach = set_reach(20, max_drop=0.05, confidence=0.95, held_out=0)
    assert reach.reach is None
    assert "no candidate at all" in reach.sentence()
