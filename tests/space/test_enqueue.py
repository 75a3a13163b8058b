"""Known recipes as candidates: `--enqueue FILE.yaml` and a space's `candidates:` are measured
right after the reference, through Optuna's enqueue, and labelled wherever trials are shown."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from rich.console import Console
from small_space import autotune_cli, small_space

from autotune.errors import SpaceError
from autotune.records.stored import TrialRecord
from autotune.space import load_space
from autotune.space.files import with_enqueued
from autotune.study.plan import plan_study
from autotune.study.results.progress import Progress
from autotune.study.run.budget import start_fits
from autotune.study.start.opening import prepare_study

CANDIDATES = [
    {"name": "small-images", "config": {"image_max_side": 128}},
    {"name": "batched", "config": {"batch_size": 2, "image_max_side": 256}},
]


@pytest.mark.slow
def test_enqueued_candidates_come_first_and_carry_their_labels(tmp_path: Path) -> None:
    params = {"image_max_side": {"choices": [None, 256, 128]}, "batch_size": {"choices": [1, 2]}}
    # Without steps every named candidate is queued at once, behind the reference (with steps
    # the later ones wait for the first steps:
    # tests/study/proposals/test_queueing_held_candidates.py).
    space = small_space(tmp_path, name="enq", trials=4, params=params, sampler={"steps": False})
    recipes = tmp_path / "recipes.yaml"
    recipes.write_text(yaml.safe_dump(CANDIDATES), encoding="utf-8")
    storage = f"sqlite:///{tmp_path}/enq.db"
    ran = autotune_cli(
        "run", "--space", str(space), "--storage", storage, "--enqueue", str(recipes),
        cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    trials = optuna.load_study(study_name="enq", storage=storage).trials
    assert trials[0].user_attrs["is_reference"] is True
    assert [t.user_attrs.get("candidate") for t in trials[1:3]] == ["small-images", "batched"]
    assert trials[1].user_attrs["config"]["image_max_side"] == 128
    assert trials[2].user_attrs["config"]["batch_size"] == 2
    assert "(candidate small-images" in ran.stderr  # the progress line names its source
    best = autotune_cli("best", "--study", "enq", "--storage", storage, cwd=tmp_path)
    assert "the reference and the named candidates beside the recommendation" in best.stdout
    assert "(small-images)" in best.stdout and "(batched)" in best.stdout
    report = autotune_cli(
        "report", "--study", "enq", "--storage", storage, "--out", str(tmp_path / "r.html"),
        cwd=tmp_path,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    named = html[html.index("Known recipes beside the recommendation") :]
    named = named[: named.index("</table>")]
    for label in ("small-images", "batched", "reference", "recommended"):
        assert f"<span class='tag'>{label}</span>" in named, label


@pytest.mark.slow
@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("name: x", "takes a list of candidates"),
        ("- name: a\n  config: {image_max_side: 5}", "image_max_side"),
        ("- name: a\n  config: {}\n- name: a\n  config: {}", "is used twice"),
        ("- name: a\n  config: {backend: lmdeploy, kv_quant: int8}", "kv_quant int8 on lmdeploy"),
        ("[[[", "malformed YAML"),
    ],
)
def test_a_bad_candidates_file_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    recipes = tmp_path / "recipes.yaml"
    recipes.write_text(content, encoding="utf-8")
    space = small_space(tmp_path, name="bad")
    ran = autotune_cli("run", "--space", str(space), "--enqueue", str(recipes), cwd=tmp_path)
    assert ran.returncode != 0 and "Traceback" not in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1 and message in ran.stderr, ran.stderr
    assert not (tmp_path / "studies").exists()


def test_the_default_space_ships_the_guides_recipe() -> None:
    space = load_space("default")
    recipe = space.candidate_config("guide-recipe")
    assert (recipe.dtype, recipe.do_sample, recipe.temperature, recipe.top_k) == (
        "bfloat16", True, 0.3, 20,
    )  # fmt: skip
    assert (recipe.top_p, recipe.repetition_penalty, recipe.max_new_tokens) == (0.7, 1.05, 512)


def many_candidates(n: int) -> list[dict[str, Any]]:
    # A raw line separator inside a name: valid JSON, and a label like any other.
    return [
        {"name": f"c{i}\u2028x", "config": {"image_max_side": 64 + (i % 200)}} for i in range(n)
    ]


@pytest.mark.slow
def test_twenty_thousand_candidates_are_read_fast_and_queued_lazily(tmp_path: Path) -> None:
    """An --enqueue file of 20,000 entries hung past 120 s: candidates were checked in
    quadratic time and every one was written as a waiting trial, even for --trials 1."""
    space = load_space(str(small_space(tmp_path, name="many", sampler={"steps": False})))
    entries = many_candidates(20_000)
    files = {
        "yaml": yaml.safe_dump(entries, allow_unicode=True),
        "jsonl": "\n".join(json.dumps(entry, ensure_ascii=False) for entry in entries) + "\n",
    }
    for suffix, text in files.items():
        path = tmp_path / f"many.{suffix}"
        path.write_text(text, encoding="utf-8")
        started = time.monotonic()
        enqueued = with_enqueued(space, str(path))
        # 3-10 s here on two shared cores; the bound only catches a hang (the quadratic
        # reading took far longer), never a busy machine: speed is bench/'s to measure.
        assert time.monotonic() - started < 600, suffix
        assert [c.name for c in enqueued.candidates[:2]] == ["c0\u2028x", "c1\u2028x"]
        assert enqueued.candidate_config("c19999\u2028x").image_max_side == 64 + 19999 % 200
    plan = plan_study(enqueued, storage_url=f"sqlite:///{tmp_path}/many.db")
    said = io.StringIO()
    progress = Progress(total=3, console=Console(file=said, width=200), live=False)
    study = prepare_study(plan, 3, progress, fits=start_fits(plan, progress))
    assert study is not None
    queued = [TrialRecord.of(t) for t in study.get_trials(states=(TrialState.WAITING,))]
    # Three trials wanted: the reference and the first two candidates, no more.
    assert [(r.is_reference, r.candidate) for r in queued] == [
        (True, None), (False, "c0\u2028x"), (False, "c1\u2028x"),
    ]  # fmt: skip
    assert "19998 of 20000 named candidates not queued" in said.getvalue()
    # A later run with room for more queues the next ones, never the same twice.
    progress = Progress(total=5, quiet=True)
    study = prepare_study(plan, 5, progress, fits=start_fits(plan, progress))
    assert study is not None
    names = [TrialRecord.of(t).candidate for t in study.get_trials(states=(TrialState.WAITING,))]
    assert names == [None, "c0\u2028x", "c1\u2028x", "c2\u2028x", "c3\u2028x"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"name": "a", "config": {}}\n{"name": ', "line 2: not valid JSON"),
        ("[1, 2]\n", "line 1: expected a JSON object with 'name' and 'config', got list"),
        ("\n\n", "takes a list of candidates"),
    ],
)
def test_a_bad_jsonl_candidates_file_is_one_line(
    tmp_path: Path, content: str, message: str
) -> None:
    space = load_space(str(small_space(tmp_path, name="bad")))
    path = tmp_path / "recipes.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(SpaceError, match=re.escape(message)):
        with_enqueued(space, str(path))


def test_an_enqueue_file_over_its_stated_size_is_refused_unread(tmp_path: Path) -> None:
    space = load_space(str(small_space(tmp_path, name="big")))
    path = tmp_path / "big.yaml"
    with path.open("wb") as handle:  # sparse: 17 MiB of nothing, never read
        handle.truncate(17 * 2**20)
    with pytest.raises(SpaceError, match=r"17\.0 MiB; it may hold at most 16 MiB"):
        with_enqueued(space, str(path))
