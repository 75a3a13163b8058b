"""The claim behind accuracy reuse: greedy answers do not depend on the batch size.

autotune.params.OUTPUT_NEUTRAL_PARAMS lists batch_size; if this test ever fails for a dtype,
batch_size has to join TrialConfig.output_key() for it.
"""

from __future__ import annotations

import pytest

from autotune.engines.inprocess.transformers import TransformersEngine
from autotune.evalset.dataset import load_evalset
from autotune.params import OUTPUT_NEUTRAL_PARAMS, TrialConfig
from autotune.records import Prompt
from autotune.space import REPO_ROOT

MODEL = str(REPO_ROOT / "models" / "tiny-qwen3-vl")


def answers(config: TrialConfig, requests: list[Prompt]) -> dict[str, str]:
    engine = TransformersEngine(MODEL, config, device="cpu")
    engine.load()
    out: dict[str, str] = {}
    for start in range(0, len(requests), config.batch_size):
        for completion in engine.generate(requests[start : start + config.batch_size], config):
            out[completion.item_id] = completion.text
    engine.close()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_answers_identical_across_batch_sizes(dtype: str) -> None:
    assert "batch_size" in OUTPUT_NEUTRAL_PARAMS
    items = load_evalset("smoke").items[:8]
    requests = [Prompt(item.id, item.load_image(), item.prompt) for item in items]
    single = answers(TrialConfig(dtype=dtype, max_new_tokens=12), requests)
    batched = answers(TrialConfig(dtype=dtype, max_new_tokens=12, batch_size=4), requests)
    assert single == batched
    assert any(single.values())  # something was actually generated


def test_sampling_puts_batch_size_into_the_key() -> None:
    greedy = TrialConfig(batch_size=1).output_key() == TrialConfig(batch_size=8).output_key()
    sampled_1 = TrialConfig(do_sample=True, temperature=0.7, batch_size=1).output_key()
    sampled_8 = TrialConfig(do_sample=True, temperature=0.7, batch_size=8).output_key()
    assert greedy
    assert sampled_1 != sampled_8
