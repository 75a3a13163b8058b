"""Known recipes as candidates: `--enqueue FILE.yaml` and a space's `candidates:` are measured
right after the reference, through Optuna's enqueue, and labelled wherever trials are shown."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml
from small_space import autotune_cli, small_space

from autotune.space import load_space

CANDIDATES = [
    {"name": "small-images", "config": {"image_max_side": 128}},
    {"name": "batched", "config": {"batch_size": 2, "image_max_side": 256}},
]


@pytest.mark.slow
def test_enqueued_candidates_come_first_and_carry_their_labels(tmp_path: Path) -> None:
    params = {"image_max_side": {"choices": [None, 256, 128]}, "batch_size": {"choices": [1, 2]}}
    space = small_space(tmp_path, name="enq", trials=4, params=params)
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
    assert "(candidate small-images)" in ran.stderr  # the progress line
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
