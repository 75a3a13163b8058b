"""The recommendation's own error, end to end: the real CLI on the smoke space's set and floor.

The smoke set's 240 items hold 99 out (what identical answers need to be confirmed at the
study's first error level); the bundled reader at side 256 answers word for word as at full
size, so the floor passes that candidate on the search items and the held-out ones confirm
it. `best --json` must say so: the error bound (1 - confidence) and the items that confirmed it.
A slower candidate measured after it (batch 1, eager attention) can never be recommended: it
answers the search floor as any trial and passes it, but answers none of the held-out items,
and records why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from small_space import SMOKE_SET, autotune_cli, run_study, small_space

from autotune.accuracy.confirm import Holdout, level
from autotune.evalset.dataset import load_evalset
from autotune.records.stored import TrialRecord

pytestmark = pytest.mark.slow


def test_best_states_the_error_and_the_items_that_confirmed_it(tmp_path: Path) -> None:
    candidate = {"name": "side-256", "config": {"batch_size": 8, "image_max_side": 256}}
    # Its own answers (eager attention: another output key), word for word side-256's.
    slow_config = {"batch_size": 1, "image_max_side": 256, "attn_implementation": "eager"}
    slower = {"name": "slower", "config": slow_config}
    # Ranked on throughput alone: a tie with the reference goes to no second objective.
    objectives = [{"metric": "throughput_output_tokens_per_s"}]
    space = small_space(
        tmp_path,
        evalset=str(SMOKE_SET),
        trials=3,
        candidates=[candidate, slower],
        objectives=objectives,
        sampler={"steps": False},  # both candidates queued first, in this order
    )
    result, study = run_study(space, study="confirm", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    held = Holdout.of(load_evalset(SMOKE_SET).decision_order(), 99)
    assert study.user_attrs["confirmation_holdout"] == {"items": 99, "digest": held.digest}
    shown = autotune_cli(
        "best", "--study", "confirm", "--storage", f"sqlite:///{tmp_path}/confirm.db", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    best = json.loads(shown.stdout)
    candidate_trial = next(t for t in study.trials if t.user_attrs.get("candidate") == "side-256")
    assert best["recommended"]["trial"] == candidate_trial.number
    confirmation = best["confirmation"]
    assert confirmation["error_bound"] == pytest.approx(0.05)
    assert confirmation["holdout"] == {"items": 99, "digest": held.digest}
    confirmed = confirmation["confirmed_by"]
    assert confirmed["holdout_digest"] == held.digest and confirmed["holdout_items"] == 99
    assert 20 <= confirmed["items"] <= 99
    assert confirmed["confirmation"] == 1
    assert confirmed["error"] == pytest.approx(level(0.05, 1))
    # The held-out items were answered by the candidate, never by its search floor.
    answered = set(candidate_trial.user_attrs["item_scores"])
    assert set(held.ids[: confirmed["items"]]) <= answered
    text = autotune_cli(
        "best", "--study", "confirm", "--storage", f"sqlite:///{tmp_path}/confirm.db",
        cwd=tmp_path,
    ).stdout  # fmt: skip
    assert f"confirmed on {confirmed['items']} of the 99 held-out items" in text, text
    assert "at most 0.05" in text
    # The slower one: judged by the search floor, not confirmed, and why.
    slow = next(t for t in study.trials if t.user_attrs.get("candidate") == "slower")
    assert slow.values[0] < candidate_trial.values[0]
    record = TrialRecord.of(slow)
    assert record.accuracy_not_judged is None
    assert record.paired_vs_reference is not None
    assert record.paired_vs_reference.decision in ("feasible", "identical answers")
    assert record.answers_computed and not set(record.predictions) & set(held.ids)
    assert "confirmation" not in slow.user_attrs
    assert record.confirmation_skipped is not None
    assert record.confirmation_skipped.confirmed_trial == candidate_trial.number
    said = f"not confirmed: slower than trial #{candidate_trial.number}, already confirmed"
    assert said in result.stdout + result.stderr
