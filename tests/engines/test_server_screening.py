"""Screening through a server: the same phase the in-process worker runs. A trial whose first
answers already miss the floor stops before its load test, PRUNED as screened out; one that
answers as the reference does goes on. A fake OpenAI server that truncates its fixed answer at
`max_tokens` words decides which is which."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest
import yaml
from fake_endpoint import endpoint_study, fake_endpoint
from optuna.trial import TrialState
from small_space import REPO, quick_space

ANSWER = "alpha beta gamma"


def answered_set(folder: Path, items: int = 16) -> Path:
    """The smoke set's first `items` images, every one expecting the fake server's answer."""
    source, target = REPO / "evalsets" / "smoke", folder / "evalset"
    (target / "images").mkdir(parents=True)
    lines = []
    for line in (source / "items.jsonl").read_text(encoding="utf-8").splitlines()[:items]:
        item = json.loads(line)
        shutil.copy(source / item["image"], target / item["image"])
        lines.append(json.dumps({**item, "answers": [ANSWER], "metric": "exact_match"}))
    (target / "items.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


@pytest.mark.slow
def test_screening_prunes_a_hopeless_server_trial_before_its_load_test(tmp_path: Path) -> None:
    path = quick_space(
        "smoke", tmp_path, evalset=answered_set(tmp_path), screening_items=8,
        max_measure_s=1.5, max_warmup_s=1,
    )  # fmt: skip
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["candidates"] = [
        {"name": "cut-short", "config": {"max_new_tokens": 1}},  # answers "alpha": wrong
        # Another output key (its answers are not the reference's to reuse), the same answers.
        {"name": "penalised", "config": {"repetition_penalty": 1.05}},
    ]
    data["trials"] = 3
    # max_new_tokens is searched and swift cannot force an answer's length: requests per
    # second is the fair rank.
    data["objectives"] = [{"metric": "throughput_requests_per_s"}]
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    storage = f"sqlite:///{tmp_path}/s.db"
    with fake_endpoint("--answer", ANSWER) as url:
        err = endpoint_study(path, "s", storage, url)
    study = optuna.load_study(study_name="s", storage=storage)
    reference, short, fine = study.get_trials(deepcopy=False)
    assert reference.state == fine.state == TrialState.COMPLETE
    assert reference.user_attrs["accuracy"] == fine.user_attrs["accuracy"] == 1.0
    # Pruned on its 8 screening answers: no load test, no figures, the rest of the set unasked.
    assert short.state == TrialState.PRUNED
    assert "throughput_output_tokens_per_s" not in short.user_attrs
    assert short.user_attrs["time_s"]["screening"] > 0
    assert short.user_attrs["time_s"].get("measuring", 0.0) == 0.0
    assert short.user_attrs["answers_computed"] == 8
    assert "screened out" in err
    # The trial that went on kept its screening answers: 16 answers for a set of 16.
    assert "accuracy_reused_from" not in fine.user_attrs
    assert fine.user_attrs["answers_computed"] == 16
