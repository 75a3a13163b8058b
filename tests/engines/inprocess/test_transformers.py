"""The in-process engine's threads: a batch prepared ahead never holds up the replies' text."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autotune.engines.inprocess.transformers import TransformersEngine
from autotune.evalset.dataset import load_evalset
from autotune.records import Prompt
from autotune.space import load_space

TINY = Path(__file__).resolve().parents[3] / "models" / "tiny-qwen3-vl"


@pytest.fixture(scope="module")
def engine() -> TransformersEngine:
    config = load_space("smoke").reference_config().model_copy(update={"backend": "transformers"})
    loaded = TransformersEngine(str(TINY), config, device="cpu")
    loaded.load()
    return loaded


def _prompts(count: int) -> list[Prompt]:
    items = load_evalset("smoke").items[:count]
    return [Prompt(item_id=i.id, image=i.load_image(), prompt=i.prompt) for i in items]


def test_replies_decode_while_the_next_batch_is_prepared(engine: TransformersEngine) -> None:
    config = engine.launch
    batch = _prompts(4)
    prepared = engine.prepare(batch, config)
    serial = [r.text for r in engine.generate(batch, config, forced_tokens=3, prepared=prepared)]
    # A prepare holding the processor (its image work) must not hold up this batch's replies:
    # before, one lock covered both and the replies waited for the whole processor call.
    with ThreadPoolExecutor(max_workers=1) as pool, engine.prepare_lock:
        future = pool.submit(
            lambda: engine.generate(batch, config, forced_tokens=3, prepared=prepared)
        )
        replies = future.result(timeout=60)  # a TimeoutError: the replies waited
    assert [r.text for r in replies] == serial
    assert engine.tokenizer is not engine.processor.tokenizer


def test_preparing_beside_decoding_answers_as_serially(engine: TransformersEngine) -> None:
    """Two threads on the tokenizers at once ("Already borrowed" once they shared one without
    a lock) answer word for word as one thread does."""
    config = engine.launch
    batches = [_prompts(6)[i : i + 2] for i in range(0, 6, 2)]
    serial = [
        [r.text for r in engine.generate(b, config, forced_tokens=4)] for b in batches for _ in "ab"
    ]
    overlapped: list[list[str]] = []
    with ThreadPoolExecutor(max_workers=1) as ahead:
        jobs = [b for b in batches for _ in "ab"]
        pending = ahead.submit(engine.prepare, jobs[0], config)
        for index, job in enumerate(jobs):
            ready = pending.result()
            if index + 1 < len(jobs):
                pending = ahead.submit(engine.prepare, jobs[index + 1], config)
            replies = engine.generate(job, config, forced_tokens=4, prepared=ready)
            overlapped.append([r.text for r in replies])
    assert overlapped == serial
    assert all(len(texts) == 2 for texts in overlapped)
