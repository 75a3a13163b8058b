"""Repeated images in load tests, and the in-process vision-embedding cache (a what-if)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image, ImageChops

from autotune.measure.repeats import ImageRepeats, mark_image

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny-qwen3-vl"
SMOKE = Path(__file__).resolve().parents[2] / "evalsets" / "smoke"


@pytest.mark.parametrize("share", [0.0, 0.5, 0.8])
def test_the_share_of_repeats_is_the_workloads(share: float) -> None:
    repeats = ImageRepeats(share, seed=1)
    sent = [repeats.next(f"item-{i % 7}") for i in range(4000)]
    assert abs(repeats.repeated / len(sent) - share) < 0.03
    fresh_marks = [mark for _, mark in dict.fromkeys(sent)]
    assert len(fresh_marks) == len(sent) - repeats.repeated  # every fresh request: a new mark
    # A repeat resends an earlier request, image and mark alike.
    seen: set[tuple[str, int]] = set()
    for request in sent:
        assert request in seen or request[1] not in {m for _, m in seen}
        seen.add(request)


def test_two_trials_share_no_mark_but_repeat_the_same_requests() -> None:
    one, two = ImageRepeats(0.5, seed=3), ImageRepeats(0.5, seed=3)
    a = [one.next("x") for _ in range(200)]
    b = [two.next("x") for _ in range(200)]
    assert {m for _, m in a}.isdisjoint({m for _, m in b})  # no cache can carry over
    assert one.repeated == two.repeated  # the same workload shape: comparable trials


def test_a_mark_changes_two_pixels_only() -> None:
    image = Image.new("RGB", (64, 48), (200, 100, 50))
    marked = mark_image(image, 0x123456789ABC)
    box = ImageChops.difference(image, marked).getbbox()
    assert box == (0, 0, 2, 1)
    assert mark_image(image, None) is image
    assert mark_image(image, 1).tobytes() != mark_image(image, 2).tobytes()


@pytest.mark.slow
def test_the_vision_cache_gives_the_same_answers_and_encodes_once() -> None:
    from autotune.engines.inprocess.transformers import TransformersEngine
    from autotune.evalset.dataset import load_evalset
    from autotune.params import TrialConfig
    from autotune.records import Prompt

    items = load_evalset(str(SMOKE)).items[:3]
    requests = [Prompt(i.id, i.load_image(), i.prompt, mark=n) for n, i in enumerate(items)]
    config = TrialConfig(dtype="float32", max_new_tokens=6, batch_size=3)
    plain = TransformersEngine(str(TINY), config, device="cpu")
    plain.load()
    cached = TransformersEngine(
        str(TINY), config.model_copy(update={"prefix_cache": True}), device="cpu"
    )
    cached.load()
    assert cached.vision_cache is not None
    expected = [c.text for c in plain.generate(requests, config)]
    first = [c.text for c in cached.generate(requests, config)]
    # The same three images again, in another order and in a batch with a new one.
    again = [requests[2], requests[0], Prompt(items[1].id, items[1].load_image(), "x", mark=99)]
    second = [c.text for c in cached.generate(again, config)]
    assert first == expected
    assert second[:2] == [expected[2], expected[0]]
    assert (cached.vision_cache.misses, cached.vision_cache.hits) == (4, 2)
    cached.reset_peak_memory()  # a new trial starts cold
    assert not cached.vision_cache.entries
