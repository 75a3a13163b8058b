"""The trial's load-test requests written out for an outside tool: the same items in the same
cycle, the same client-side resize and marks, the same forced lengths, the trial's fields."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image
from small_space import small_evalset

from autotune.engines import measure_plan
from autotune.engines.server import chat_prompts
from autotune.engines.session import Served, cycled
from autotune.evalset.dataset import load_evalset
from autotune.measure.lengths import AnswerLengths
from autotune.measure.repeats import ImageRepeats
from autotune.outside.requests import common_fields, study_requests
from autotune.params import TrialConfig
from autotune.space import load_space

FIELDS = {"max_tokens": 16, "temperature": 0, "repetition_penalty": 1.0}


def _decoded(url: str) -> Image.Image:
    assert url.startswith("data:image/png;base64,")
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    folder = small_evalset(tmp_path_factory.mktemp("requests"), n_text=3, n_shapes=2)
    return Served("http://127.0.0.1:1", "m", dict(FIELDS), None, chat_prompts(load_evalset(folder)))


def test_requests_follow_the_load_test_s_cycle_resize_and_fresh_marks(served: Served) -> None:
    space = load_space("smoke")
    space.workload.requests = 3  # one pass of three items, cycled
    config = TrialConfig(batch_size=2, image_max_side=64)
    plan = measure_plan(space, config, accuracy_ids=None)
    requests = study_requests(served, plan, config.image_max_side, 7)
    ids = [prompt.item_id for prompt in served.prompts]
    assert [r.item_id for r in requests] == [ids[k % 3] for k in range(7)]
    by_id = {prompt.item_id: prompt for prompt in served.prompts}
    for request in requests:
        image = _decoded(request.image_url)
        assert max(image.size) == min(64, max(by_id[request.item_id].image.size))
        assert request.pixels == image.width * image.height
        assert request.prompt == by_id[request.item_id].prompt
        assert request.output_tokens is None  # this server forces no lengths
    # Every request is a fresh image (no repeats in this workload): no cache can serve it.
    assert len({r.image_url for r in requests}) == 7
    assert common_fields(served, requests) == FIELDS


def test_a_workload_that_repeats_images_repeats_the_same_ones(served: Served) -> None:
    space = load_space("smoke")
    space.workload.repeat_image_share = 0.5
    plan = measure_plan(space, TrialConfig(batch_size=1), accuracy_ids=None)
    requests = study_requests(served, plan, None, 20)
    repeats = ImageRepeats(0.5, seed=plan.seed)
    workload = cycled([prompt.item_id for prompt in served.prompts], plan.workload_requests)
    expected = [repeats.next(workload[k % len(workload)])[0] for k in range(20)]
    assert repeats.repeated > 0
    assert len({r.image_url for r in requests}) == 20 - repeats.repeated
    assert [r.item_id for r in requests] == expected


def test_forced_lengths_are_the_load_test_s_and_the_cap_leaves_the_fields(
    served: Served, tmp_path: Path
) -> None:
    space = load_space("smoke")
    space.workload.output_tokens = 40
    space.workload.output_tokens_spread = 0.25
    plan = measure_plan(space, TrialConfig(batch_size=4), accuracy_ids=None)
    forcing = Served(served.base_url, served.model, dict(FIELDS), lambda n: {}, served.prompts)
    requests = study_requests(forcing, plan, None, 12)
    lengths = AnswerLengths(40, 0.25)
    assert [r.output_tokens for r in requests] == [lengths.next() for _ in range(12)]
    assert len({r.output_tokens for r in requests}) > 1  # spread, not one length
    # The tool sends each length itself (and ignore_eos): the trial's cap would contradict it.
    assert common_fields(forcing, requests) == {"temperature": 0, "repetition_penalty": 1.0}
