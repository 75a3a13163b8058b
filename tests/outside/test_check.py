"""The cross-check's result, in JSON and in words. The real tool against the real `swift deploy`
runs on the README's first study (tests/end_to_end/test_first_run.py)."""

from __future__ import annotations

import json

from autotune.outside.check import CrossCheck, OutsideRun, cross_check_text
from autotune.outside.guidellm import OutsideFigures
from autotune.verify import VerifyResult

THROUGHPUT = "throughput_output_tokens_per_s"


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
