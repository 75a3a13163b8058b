"""GuideLLM's side: the dataset rows and scenario it is given, its report read back, and the
one line a user without it gets (the real tool runs in tests/outside/test_check.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.engines.session import Served
from autotune.errors import AutotuneError
from autotune.outside import guidellm
from autotune.outside.requests import OutsideRequest

SERVED = Served("http://127.0.0.1:8000", "tiny", {"max_tokens": 16}, None, [])
PNG = "data:image/png;base64,iVBORw0KGgo="


def test_rows_carry_each_request_s_prompt_encoded_image_and_forced_length() -> None:
    free = OutsideRequest("a", "Read it.", PNG, 64, None)
    forced = OutsideRequest("b", "Count them.", PNG, 32, 40)
    rows = guidellm.dataset_rows([free, forced])
    assert rows[0] == {
        "prompt": "Read it.",
        "image": {"image": PNG, "image_pixels": 64, "image_bytes": len(PNG)},
    }
    # GuideLLM turns output_tokens_count into max_completion_tokens with ignore_eos.
    assert rows[1]["output_tokens_count"] == 40 and "output_tokens_count" not in rows[0]


@pytest.mark.parametrize(("rate", "profile"), [(None, "concurrent"), (2.5, "poisson")])
def test_the_scenario_sends_every_row_once_in_order_at_the_trial_s_load(
    tmp_path: Path, rate: float | None, profile: str
) -> None:
    spec = guidellm.scenario(
        SERVED, fields={"max_tokens": 16}, dataset=tmp_path / "r.jsonl",
        report=tmp_path / "out.json", requests=24, warmup=5, concurrency=8, rate_per_s=rate,
    )["spec"]  # fmt: skip
    assert spec["backend"]["target"] == SERVED.base_url and spec["backend"]["model"] == "tiny"
    assert spec["backend"]["extras"] == {"body": {"max_tokens": 16}}
    assert spec["backend"]["request_format"] == "/v1/chat/completions"
    assert spec["constraints"] == [{"kind": "max_requests", "count": 24}]
    assert spec["profile"]["kind"] == profile
    assert spec["profile"]["warmup"] == {"mode": "requests", "value": 5}
    load = spec["profile"].get("streams") if rate is None else spec["profile"]["rate"]
    assert load == ([8] if rate is None else [rate])
    # No media encoder (it re-encodes as JPEG) and no shuffle: the rows go as written.
    assert spec["data_preprocessors"] == [] and spec["data_loader"]["shuffle"] is False


def test_a_report_that_is_not_there_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "half.json").write_text(json.dumps({"benchmarks": []}), encoding="utf-8")
    for path in (tmp_path / "none.json", tmp_path / "half.json"):
        with pytest.raises(guidellm.OutsideFailure, match="no readable report"):
            guidellm.read_report(path)


def test_a_missing_tool_is_one_line_naming_the_pip_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The module name the check looks for, as on a machine without the extra.
    monkeypatch.setattr(guidellm, "MODULE", "autotune_test_no_such_module")
    with pytest.raises(AutotuneError) as raised:
        guidellm.check_installed()
    assert "pip install 'autotune[client-guidellm]'" in str(raised.value)
    result = CliRunner().invoke(main, ["verify", "--study", "none", "--client", "guidellm"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: {raised.value}"], result.output
