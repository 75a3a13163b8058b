"""The HTTP client sends the pixels the in-process engine would see, in the same chat layout."""

from __future__ import annotations

import base64
import io

from PIL import Image, ImageChops

from autotune.client import image_data_url, normalize_base_url
from autotune.client.chat import chat_body
from autotune.evalset.images import resize_to_max_side


def test_image_is_resized_like_the_engine_and_sent_losslessly() -> None:
    image = Image.effect_noise((300, 120), 60).convert("RGB")
    url = image_data_url(image, 128)
    assert url.startswith("data:image/png;base64,")
    sent = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
    expected = resize_to_max_side(image, 128)
    assert sent.size == expected.size == (128, 51)
    assert ImageChops.difference(sent, expected).getbbox() is None  # identical pixels


def test_body_streams_with_usage_and_puts_the_image_first() -> None:
    body = chat_body("m", "Read it.", "data:image/png;base64,AA==", {"max_tokens": 8})
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 8
    kinds = [part["type"] for part in body["messages"][0]["content"]]
    assert kinds == ["image_url", "text"]


def test_base_url_accepts_the_usual_spellings() -> None:
    for url in ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1/", "127.0.0.1:8000/"):
        assert normalize_base_url(url) == "http://127.0.0.1:8000"
