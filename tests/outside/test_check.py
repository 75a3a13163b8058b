"""`autotune verify --client guidellm` with the real tool against the bundled model's real
`swift deploy`: one relaunch measured by autotune and by GuideLLM, the same number of requests
at the trial's concurrency, both figures side by side."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
from small_space import FIGURES_WORKLOAD, autotune_cli, quick_space, small_evalset

from autotune.outside.check import CrossCheck, OutsideRun, cross_check_text
from autotune.outside.guidellm import OutsideFigures
from autotune.verify import VerifyResult

THROUGHPUT = "throughput_output_tokens_per_s"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The smoke study's reference and its batch-8 candidate, measured through `swift deploy`."""
    pytest.importorskip("openai")  # ms-swift's server
    pytest.importorskip("guidellm")
    tmp = tmp_path_factory.mktemp("outside")
    space = quick_space(
        "smoke", tmp, evalset=small_evalset(tmp, n_text=2, n_shapes=1), screening_items=0,
        **FIGURES_WORKLOAD,
    )  # fmt: skip
    storage = f"sqlite:///{tmp}/o.db"
    run = autotune_cli("run", "--space", str(space), "--trials", "2", "--study", "o",
                       "--storage", storage, cwd=tmp)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return tmp, storage


@pytest.mark.slow
@pytest.mark.swift
def test_guidellm_measures_the_relaunch_with_the_same_requests(study: tuple[Path, str]) -> None:
    tmp, storage = study
    trial = optuna.load_study(study_name="o", storage=storage).trials[1]
    batch = trial.user_attrs["config"]["batch_size"]
    assert batch == 8  # the candidate: eight in flight, so concurrency is put to the test
    # --tolerance 1.0: this is about what the tool is given and prints, not this machine's load.
    done = autotune_cli("verify", "--study", "o", "--storage", storage, "--trial", "1",
                        "--tolerance", "1.0", "--client", "guidellm", cwd=tmp)  # fmt: skip
    text = done.stdout
    assert done.returncode in (0, 1), done.stderr[-3000:]
    said = re.search(
        r"GuideLLM \S+ sent (\d+) requests \((\d+) measured, (\d+) errored\) at (\d+) in flight "
        r"\((\S+) at most seen\); autotune's load test sent (\d+) on this launch \((\d+) warm-up\)"
        r" at (\d+) in flight",
        text,
    )
    assert said, text
    sent, measured, errored, streams, seen, ours, warmup, our_streams = said.groups()
    # As many requests as autotune's load test sent; which of them its warm-up covers is
    # GuideLLM's own rule (it was told how many), so its measured ones are only bounded.
    assert int(sent) == int(ours) > int(warmup) and 0 < int(measured) < int(sent)
    assert int(errored) == 0
    assert int(streams) == int(our_streams) == batch and float(seen) == batch
    # The outside table follows its line (verify's own table, above it, has the same rows).
    after = text[said.end() :].splitlines()
    row = next(line for line in after if line.startswith(f"│ {THROUGHPUT}"))
    recorded, autotune, outside, ratio = [cell.strip() for cell in row.split("│")[2:6]]
    assert float(recorded) > 0 and float(autotune) > 0 and float(outside) > 0, row
    assert ratio == f"{float(outside) / float(autotune):.2f}x"
    # The verdict stays verify's own: the outside figure is shown, not judged.
    assert done.returncode == (0 if "\nPASS\n" in text else 1), text


def test_the_json_form_carries_both_sides_and_what_the_tool_was_asked() -> None:
    figures = OutsideFigures("GuideLLM", "0.7.4", 21.0, 900.0, 1000.0, 880.0, 34, 7, 0, 8, 8.0)
    run = OutsideRun("guidellm", requests=34, warmup=27, concurrency=8, figures=figures,
                     measured={THROUGHPUT: 23.4})  # fmt: skip
    check = CrossCheck(VerifyResult("s", 1, "swift server", "swift deploy ...", True, []), run)
    data = json.loads(json.dumps(check.to_dict()))
    assert data["outside"]["figures"][THROUGHPUT] == 21.0
    assert data["outside"]["measured"][THROUGHPUT] == 23.4
    assert (data["outside"]["requests"], data["outside"]["concurrency"]) == (34, 8)
    assert data["passed"] is True
    failed = CrossCheck(check.verify, OutsideRun("guidellm", failure="GuideLLM exited with 1"))
    assert failed.to_dict()["passed"] is False
    assert "FAIL: guidellm did not measure: GuideLLM exited with 1" in cross_check_text(failed)
