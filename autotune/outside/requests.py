"""The requests of a trial's load test, written out for an outside load generator.

An outside tool's figure answers the study's question only if it sends what autotune's own
load test sends: the same items in the same cycle, each image shrunk on the client to the
trial's image_max_side and marked as the load test marks it (a fresh mark per request unless
the workload repeats images, so no image or prefix cache serves a request the load test had
computed), the trial's request fields, and where the workload forces answer lengths, the same
seeded lengths. Images travel as PNG, lossless, so the server decodes the very pixels the load
test sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.client.chat import image_data_url
from autotune.engines.server import CAP_FIELDS
from autotune.engines.session import MeasurePlan, Served, cycled
from autotune.evalset.images import resize_to_max_side
from autotune.measure.repeats import ImageRepeats


@dataclass(frozen=True)
class OutsideRequest:
    """One chat-completions request: its prompt, its image as a data URL and, where the
    workload forces lengths, the answer's length in tokens."""

    item_id: str
    prompt: str
    image_url: str
    pixels: int
    output_tokens: int | None


def study_requests(
    served: Served, plan: MeasurePlan, image_max_side: int | None, count: int
) -> list[OutsideRequest]:
    """The first `count` requests of the trial's load test, in the order it starts them.

    The load test cycles the first `plan.workload_requests` items of the launch's prompts;
    each request's image and mark come from the same seeded choice (autotune.measure.repeats)
    and its forced length from the same seeded sequence (plan.answer_lengths).
    """
    by_id = {prompt.item_id: prompt for prompt in served.prompts}
    workload = cycled(list(by_id), plan.workload_requests)
    repeats = ImageRepeats(plan.repeat_image_share, seed=plan.seed)
    lengths = plan.answer_lengths() if served.forced is not None else None
    requests = []
    for number in range(count):
        item_id, mark = repeats.next(workload[number % len(workload)])
        prompt = by_id[item_id]
        image = resize_to_max_side(prompt.image, image_max_side)
        requests.append(
            OutsideRequest(
                item_id=item_id,
                prompt=prompt.prompt,
                image_url=image_data_url(image, None, mark),
                pixels=image.width * image.height,
                output_tokens=lengths.next() if lengths is not None else None,
            )
        )
    return requests


def common_fields(served: Served, requests: Sequence[OutsideRequest]) -> dict[str, Any]:
    """The fields every request carries: the trial's own, less its cap on tokens where each
    request forces its length (the tool then sends the length and ignore_eos itself)."""
    if any(request.output_tokens is not None for request in requests):
        return {key: value for key, value in served.fields.items() if key not in CAP_FIELDS}
    return dict(served.fields)
