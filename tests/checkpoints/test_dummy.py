"""--dummy-weights: random-weight checkpoints of a real architecture, accuracy timed, not judged.

The CPU runs use the smoke space's tiny architecture (the same code path as the 2B one on a
GPU); the 2B config is checked on the meta device, where building it costs no memory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autotune.checkpoints.dummy import (
    BUNDLED_CONFIGS,
    COMPLETE_MARKER,
    TOKENIZER_SOURCE,
    architecture_config,
    checkpoint_key,
    dummy_checkpoint,
    silenced_ids,
)
from autotune.cli import main
from autotune.errors import AutotuneError, ModelError, SpaceError
from autotune.evalset.dataset import load_evalset
from autotune.records.stored import TrialRecord
from autotune.space import load_space
from autotune.study import plan_study

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "models" / "tiny-qwen3-vl"


@pytest.fixture
def dummy_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "dummy-checkpoints"
    monkeypatch.setenv("AUTOTUNE_DUMMY_DIR", str(path))
    return path


def quick_space(tmp_path: Path, *, items: int = 4, floor: dict | None = None) -> Path:
    """The smoke space on absolute paths, `items` items, 4 measured requests, 2 trials."""
    data = yaml.safe_load((REPO / "search_spaces" / "smoke.yaml").read_text(encoding="utf-8"))
    source = REPO / "evalsets" / "smoke"
    target = tmp_path / "evalset"
    (target / "images").mkdir(parents=True)
    lines = (source / "items.jsonl").read_text(encoding="utf-8").splitlines()[:items]
    for line in lines:
        image = json.loads(line)["image"]
        shutil.copy(source / image, target / image)
    (target / "items.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    data.pop("candidates", None)  # two trials: the reference and one proposal
    data.update(
        model=str(TINY),
        evalset=str(target),
        trials=2,
        workload={"warmup_requests": 1, "requests": 2, "max_requests": 4},
        params={"batch_size": {"choices": [1, 2]}},
    )
    if floor is not None:
        data["constraints"]["accuracy"] = floor
        # Another image side than the reference's: other answers, so no reuse of its pass.
        data["params"]["image_max_side"] = {"choices": [256]}
    path = tmp_path / "quick.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def run_dummy_study(space: Path, tmp_path: Path, study: str = "d") -> tuple[str, str]:
    """`autotune run --dummy-weights` of `space` as `study`: (its storage, the output)."""
    storage = f"sqlite:///{tmp_path / 'dummy.db'}"
    run = CliRunner().invoke(
        main,
        ["run", "--space", str(space), "--dummy-weights", "--storage", storage, "--study", study],
        catch_exceptions=False,
    )
    assert run.exit_code == 0, run.output
    return storage, run.output


def test_bundled_2b_config_has_the_tiny_models_keys_and_2b_parameters() -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForImageTextToText

    real = architecture_config("Qwen/Qwen3-VL-2B-Instruct")
    tiny = json.loads((TINY / "config.json").read_text(encoding="utf-8"))

    def keys(data: dict, prefix: str = "") -> set[str]:
        found = set()
        for key, value in data.items():
            found.add(prefix + key)
            if isinstance(value, dict) and key != "rope_scaling":
                found |= keys(value, f"{prefix}{key}.")
        return found

    # Same layout as the bundled test model, which transformers 5.17-5.19 and LMDeploy read.
    assert keys(real) == keys(tiny) - {"transformers_version"}
    text = real["text_config"]
    assert (text["bos_token_id"], text["eos_token_id"], text["pad_token_id"]) == (
        151643,
        151645,
        151643,
    )
    config = AutoConfig.for_model(**real)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    assert 2.12e9 < params < 2.14e9  # the released checkpoint: about 2.13 B (4.26 GB in bf16)


def test_unknown_hub_model_is_one_line_model_error() -> None:
    with pytest.raises(ModelError, match="bundled: Qwen/Qwen3-VL-2B-Instruct") as info:
        architecture_config("someone/other-model")
    assert "\n" not in str(info.value)
    assert set(BUNDLED_CONFIGS) == {"Qwen/Qwen3-VL-2B-Instruct"}


def test_silenced_ids_are_whitespace_added_tokens_and_the_unused_tail() -> None:
    tokenizer = json.loads((TOKENIZER_SOURCE / "tokenizer.json").read_text(encoding="utf-8"))
    ids = set(silenced_ids(tokenizer, 151936))
    assert set(range(151643, 151936)) <= ids  # eos and every added token: never emitted
    assert tokenizer["model"]["vocab"][" "] in ids
    assert tokenizer["model"]["vocab"]["a"] not in ids
    assert len(ids) < 151936 - 100_000  # most ids stay visible characters


def test_checkpoint_key_follows_the_architecture() -> None:
    tiny = architecture_config(str(TINY))
    real = architecture_config("Qwen/Qwen3-VL-2B-Instruct")
    assert checkpoint_key(tiny) == checkpoint_key(dict(tiny))
    assert checkpoint_key(tiny) != checkpoint_key(real)


def test_endpoint_and_dummy_weights_do_not_mix() -> None:
    with pytest.raises(SpaceError, match="--dummy-weights"):
        plan_study(load_space("smoke"), endpoint="http://127.0.0.1:9", dummy_weights=True)


@pytest.mark.slow
def test_eval_with_dummy_weights_measures_speed_only(tmp_path: Path, dummy_dir: Path) -> None:
    space = quick_space(tmp_path)
    result = CliRunner().invoke(
        main, ["eval", "--space", str(space), "--dummy-weights", "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the progress goes to stderr
    assert data["dummy_weights"] is True
    assert data["accuracy"] is None
    assert data["figures"]["throughput_output_tokens_per_s"] > 0
    assert data["figures"]["load_requests"] == 4  # workload.max_requests
    assert 1 <= data["figures"]["measured_requests"] <= 4  # those inside the steady window
    # Built once, complete, with the char-level tokenizer and a real safetensors file.
    (checkpoint,) = [p for p in dummy_dir.iterdir() if p.is_dir()]
    assert (checkpoint / COMPLETE_MARKER).is_file()
    assert (checkpoint / "model.safetensors").stat().st_size > 1_000_000
    assert json.loads((checkpoint / "config.json").read_text()) == architecture_config(str(TINY))

    text = CliRunner().invoke(main, ["eval", "--space", str(space), "--dummy-weights"])
    assert text.exit_code == 0, text.output
    assert "accuracy: not measured (dummy weights" in text.output
    assert len([p for p in dummy_dir.iterdir() if p.is_dir()]) == 1  # reused, not rebuilt


@pytest.mark.slow
def test_study_with_dummy_weights_times_accuracy_and_judges_nothing(
    tmp_path: Path, dummy_dir: Path
) -> None:
    """Each trial answers the items the floor would need, each as long as the rule says (the
    server's usage count), and records the time, never a verdict."""
    import optuna

    from autotune.accuracy.confirm import Holdout, holdout_size
    from autotune.accuracy.sequential import stage_sizes
    from autotune.accuracy.timed import TIMED_NOTE, items_to_time
    from autotune.space.settings import AccuracyConstraint

    space = quick_space(tmp_path, items=40, floor={"mode": "relative", "max_drop": 0.3})
    storage, output = run_dummy_study(space, tmp_path)
    assert "dummy weights" in output

    study = optuna.load_study(study_name="d", storage=storage)
    assert study.user_attrs["dummy_weights"] is True
    assert any(note.startswith(TIMED_NOTE) for note in study.user_attrs["notes"])
    assert study.user_attrs["space"]["constraints"]["accuracy"]["enabled"] is False
    assert study.user_attrs["space"]["screening"]["items"] == 0
    evalset = load_evalset(str(tmp_path / "evalset"))
    answers = {item.id: item.answers[0] for item in evalset.items}
    # One item at a time (the quick workload names no accuracy batch): the floor's first
    # look at or past the items it needs to pass a candidate that loses nothing at 5%
    # discordance.
    # Then, as a candidate the floor passes would, the held-out slice's items through the
    # confirmation's first look past what it needs (the slice's 19 items are one look).
    order = evalset.decision_order()
    held = Holdout.of(order, holdout_size(AccuracyConstraint(max_drop=0.3), len(order)))
    searched = held.search_order(order)
    needed = items_to_time(0.3, 0.9, len(searched))
    looks = stage_sizes(len(searched), first=20, batch=1)
    stated = next(look for look in looks if look >= needed)
    assert stated == 20 < len(searched) and len(held.ids) == 19
    expected = searched[:stated] + held.ids
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 2
    reference, candidate = complete
    # The reference times its first stage alone, as a real study's reference answers it (here
    # as many as the candidate's floor items): the held-out ones only when a candidate's
    # confirmation asks for them, as an extension of the reference.
    assert f"reference: {stated} of {len(searched)} items answered (stage 1)" in output
    extensions = [v for k, v in study.user_attrs.items() if k.startswith("reference_extension_")]
    timed = {reference.number: searched[:stated], candidate.number: expected}
    # As a real study: a candidate no faster than the (deployable) reference times its
    # floor's items after its load test but no held-out one, and says why.
    if candidate.values[0] <= reference.values[0]:
        record = TrialRecord.of(candidate)
        assert record.accuracy_not_judged is None
        assert record.confirmation_skipped is not None
        assert record.confirmation_skipped.confirmed_trial == reference.number
        assert record.constraints is not None and record.constraints["accuracy"] == 0.0
        timed[candidate.number] = searched[:stated]
        assert extensions == []
    else:  # the reference timed the slice when the candidate's confirmation asked for it
        (extension,) = extensions
        assert sorted(extension["predictions"]) == sorted(held.ids)
        assert extension["for_trial"] == candidate.number and extension["stage"] == 1
        assert all(v.startswith("<timed: ") for v in extension["predictions"].values())
        assert f"(stage 1: {len(held.ids)} more for trial {candidate.number} in " in output
    # The candidate's progress line: which branch it takes depends on the two trials' speeds,
    # which the machine's load decides, so the count is the branch's.
    assert f"acc timed, not judged ({len(timed[candidate.number])} items)" in output
    for trial in complete:
        attrs = trial.user_attrs
        assert attrs["time_s"]["accuracy"] > 0
        assert attrs["accuracy_timed_items"] == len(timed[trial.number])
        tokens = attrs["accuracy_timed_tokens"]
        assert list(tokens) == timed[trial.number]  # the searched items, then the held-out
        max_new = attrs["config"]["max_new_tokens"]
        assert tokens == {i: min(len(answers[i]) + 1, max_new) for i in tokens}
        assert attrs["accuracy_timed_answer_tokens"] == sum(tokens.values())
        for verdict in ("accuracy", "predictions", "item_scores", "paired_vs_reference"):
            assert verdict not in attrs
        assert attrs["constraints"]["accuracy"] == 0.0 and not attrs["infeasible_because"]
        assert attrs["throughput_output_tokens_per_s"] > 0

    best_text = CliRunner().invoke(main, ["best", "--storage", storage, "--study", "d"])
    assert f"{TIMED_NOTE} (its pass is in the time split; no verdict)" in best_text.output
    timeshare = CliRunner().invoke(main, ["best", "--storage", storage, "--study", "d", "--json"])
    data = json.loads(timeshare.output)
    assert data["accuracy_timed_not_judged"] is True and data["time"]["accuracy_s"] > 0


@pytest.mark.slow
def test_a_second_dummy_study_reuses_the_timed_passes_from_the_answers_cache(
    tmp_path: Path, dummy_dir: Path
) -> None:
    """The answers cache keeps a timed pass's answer lengths (never a text), so a second
    study on the same checkpoint and set answers nothing it already timed."""
    import optuna

    space = quick_space(tmp_path, items=40, floor={"mode": "relative", "max_drop": 0.3})
    storage, _ = run_dummy_study(space, tmp_path, study="first")
    _, output = run_dummy_study(space, tmp_path, study="second")
    assert "timed accuracy passes reused from the answers cache" in output
    for name, reused in (("first", False), ("second", True)):
        study = optuna.load_study(study_name=name, storage=storage)
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        assert len(complete) == 2
        for trial in complete:
            attrs = trial.user_attrs
            if reused:
                assert attrs["answers_computed"] == 0
                assert str(attrs["accuracy_reused_from"]).startswith("cache:")
                assert "accuracy_timed_items" not in attrs
            else:
                assert attrs["answers_computed"] == attrs["accuracy_timed_items"] > 0
    entries = list((tmp_path / "answers").rglob("*.json"))
    assert entries and all("<timed: " in e.read_text() for e in entries if "digest" not in e.name)


@pytest.mark.slow
def test_a_dummy_studys_reference_times_its_first_stage_and_is_extended_on_demand(
    tmp_path: Path, dummy_dir: Path
) -> None:
    """Issue 53: as a real study's, the reference answers up front only the floor's first
    stage at which a candidate can pass; a candidate whose timed floor reaches past it
    extends the reference a stage at a time (ReferenceStages.extend), recorded and said as a
    real extension is, its answers kept as lengths."""
    import optuna

    from autotune.accuracy.reuse import staged_reference
    from autotune.accuracy.timed import items_to_time

    # 60 items, no held-out slice at this floor: a candidate answering word for word as the
    # reference passes after 40 items (stage 1: the look at 45), one at 5% discordance needs
    # 48 (the look at 60).
    floor = {"mode": "relative", "max_drop": 0.08, "confidence": 0.9}
    space = quick_space(tmp_path, items=60, floor=floor)
    storage, output = run_dummy_study(space, tmp_path)
    study = optuna.load_study(study_name="d", storage=storage)
    order = load_evalset(str(tmp_path / "evalset")).decision_order()
    stages = staged_reference(60, screening=0, max_drop=0.08, confidence=0.9, batch=1)
    assert stages == [45, 60] and items_to_time(0.08, 0.9, 60) > stages[0]
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    reference, candidate = complete
    assert reference.user_attrs["is_reference"] is True
    # Stage 1 alone up front: the reference's timed items are its size.
    assert reference.user_attrs["accuracy_timed_items"] == stages[0]
    assert list(reference.user_attrs["accuracy_timed_tokens"]) == order[: stages[0]]
    assert "reference: 45 of 60 items answered (stage 1)" in output
    # The candidate's floor times all 60: the reference answered stage 2 for it first.
    assert candidate.user_attrs["accuracy_timed_items"] == 60
    assert (
        f"reference: 60 of 60 items answered (stage 2: 15 more for trial {candidate.number} in "
        in output
    )
    (key,) = [k for k in study.user_attrs if k.startswith("reference_extension_")]
    extension = study.user_attrs[key]
    assert extension["stage"] == 2 and extension["answered_items"] == 60
    assert extension["for_trial"] == candidate.number and extension["computed"] == 15
    assert sorted(extension["predictions"]) == sorted(order[45:60])
    assert all(v.startswith("<timed: ") for v in extension["predictions"].values())
    assert extension["item_scores"] == {}  # lengths are never scored
    # Its time is the candidate's, as a real extension's is.
    assert candidate.user_attrs["time_s"]["accuracy"] >= extension["seconds"]


@pytest.mark.slow
def test_study_with_dummy_weights_records_why_and_skips_accuracy(
    tmp_path: Path, dummy_dir: Path
) -> None:
    import optuna

    space = quick_space(tmp_path)
    storage, _ = run_dummy_study(space, tmp_path)
    study = optuna.load_study(study_name="d", storage=storage)
    assert study.user_attrs["dummy_weights"] is True
    assert any("accuracy" in note and "not judged" in note for note in study.user_attrs["notes"])

    best = CliRunner().invoke(main, ["best", "--storage", storage, "--study", "d", "--json"])
    assert json.loads(best.output)["dummy_weights"] is True
    export = CliRunner().invoke(
        main, ["export", "--storage", storage, "--study", "d", "--format", "vllm"]
    )
    assert export.exit_code == 0, export.output
    assert "dummy" in export.output.splitlines()[0]
    assert str(TINY) in export.output  # the command names the real model, not the dummy

    # A fresh machine (or a cleaned cache) lacks the recorded checkpoint: verify rebuilds it,
    # as lmdeploy would otherwise read the missing path as a hub id and fail.
    shutil.rmtree(dummy_dir)
    verify = CliRunner().invoke(
        main,
        ["verify", "--storage", storage, "--study", "d", "--format", "swift", "--json"],
        catch_exceptions=False,
    )
    report = json.loads(verify.stdout)
    assert report["failure"] is None, report
    (rebuilt,) = [p for p in dummy_dir.iterdir() if p.is_dir()]
    assert (rebuilt / COMPLETE_MARKER).is_file()
    assert report["command"].startswith("IMAGE_MIN_TOKEN_NUM=")
    assert str(rebuilt) in report["command"]

    resumed = CliRunner().invoke(
        main, ["run", "--space", str(space), "--storage", storage, "--study", "d"]
    )
    assert resumed.exit_code == 2
    assert "--dummy-weights" in resumed.output


def test_report_of_a_stored_dummy_weights_study(tmp_path: Path) -> None:
    """No trial of a dummy-weights study has an accuracy: the Pareto plot colours them grey
    instead of failing on a colour scale with gaps (every GPU speed study is one)."""
    from study_factory import build_study, plot_data

    url, name = build_study(tmp_path, dummy_weights=True)
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", "--storage", url, "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = out.read_text(encoding="utf-8")
    traces = plot_data(document, "plot-pareto")
    unmeasured = [t for t in traces if t["name"].endswith("accuracy not measured")]
    assert unmeasured and all(t["marker"]["color"] == "#999999" for t in unmeasured)
    assert sorted(n for t in unmeasured for n in t["customdata"]) == [0, 1, 2, 3, 4, 5]
    assert "plot-accuracy" not in document  # nothing to draw
    best = CliRunner().invoke(main, ["best", "--storage", url, "--study", name])
    assert best.exit_code == 0 and "accuracy not measured" in best.output


def test_a_pool_that_cannot_be_built_fails_a_dummy_study_in_one_line(
    tmp_path: Path, dummy_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timed pass answers the pool's items, so a dummy-weights study needs the pool built;
    where it cannot be, one line says so before any checkpoint is built."""
    import autotune.evalset.pools as pools

    monkeypatch.setattr(pools, "REPO_ROOT", tmp_path)  # an installation without tools/
    monkeypatch.setattr(pools, "POOLS_DIR", tmp_path / "evalsets")
    data = yaml.safe_load(quick_space(tmp_path).read_text(encoding="utf-8"))
    space = tmp_path / "pool.yaml"
    space.write_text(yaml.safe_dump({**data, "evalset": "ocr-caption-3k"}), encoding="utf-8")
    storage = f"sqlite:///{tmp_path / 'p.db'}"
    result = CliRunner().invoke(
        main, ["run", "--space", str(space), "--dummy-weights", "--storage", storage]
    )
    assert result.exit_code != 0
    (line,) = result.output.strip().splitlines()
    assert "evaluation pool 'ocr-caption-3k' is not built" in line
    assert not dummy_dir.exists() and not (tmp_path / "p.db").exists()


@pytest.mark.parametrize("where", ["/etc/hostname", "/etc/hostname/inside"])
def test_a_dummy_dir_that_cannot_be_a_folder_is_one_line(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """/etc/hostname raised FileExistsError from mkdir; a path through a file is refused too."""
    monkeypatch.setenv("AUTOTUNE_DUMMY_DIR", where)
    with pytest.raises(AutotuneError) as caught:
        dummy_checkpoint("Qwen/Qwen3-VL-2B-Instruct")
    message = str(caught.value)
    assert "\n" not in message and "AUTOTUNE_DUMMY_DIR" in message, message
    assert "/etc/hostname" in message
