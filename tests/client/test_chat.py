"""The HTTP client sends the pixels the in-process engine would see, in the same chat layout."""

from __future__ import annotations

import asyncio
import base64
import io
import subprocess
import sys
import time

import httpx
from fake_server import FAKE
from PIL import Image, ImageChops

from autotune.client import image_data_url, normalize_base_url
from autotune.client.chat import ChatClient, chat_body
from autotune.engines.server_process import free_port
from autotune.evalset.images import resize_to_max_side
from autotune.records import Prompt


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


def test_a_raw_line_separator_inside_a_streamed_answer_stays_in_it() -> None:
    """A server writing JSON unescaped (vLLM) sends U+2028, U+2029 and U+0085 raw inside a
    string; server-sent events end lines at CR and LF only (httpx's aiter_lines also split
    there, and the chunk was refused as malformed)."""
    answer = "one\u2028two\u2029three\u0085four five"
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, FAKE, "--port",
         str(port), "--unescaped", "--answer", answer, "--chunk-delay", "0"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)

        async def ask() -> str:
            async with httpx.AsyncClient(timeout=30) as client:
                chat = ChatClient(
                    client, base_url=f"http://127.0.0.1:{port}", model="fake-model",
                    fields={"max_tokens": 16}, image_max_side=None,
                )  # fmt: skip
                image = Image.new("RGB", (32, 32), (10, 20, 30))
                return (await chat.send(Prompt("a", image, "Read it."))).text

        assert asyncio.run(ask()) == answer
    finally:
        server.kill()
        server.wait()


def test_a_request_the_server_drops_names_its_item_and_image() -> None:
    """A server that closes the connection on a request it cannot take (a real socket that
    accepts and closes): the error names the item and the image, not only the transport's
    'peer closed connection'."""
    import socket
    import threading

    import pytest

    from autotune.client import ChatError, http_client

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]

    def drop() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.recv(65536)
            connection.close()

    threading.Thread(target=drop, daemon=True).start()
    prompt = Prompt(item_id="thin-01", image=Image.new("RGB", (1, 300)), prompt="Read it.")

    async def send() -> None:
        async with http_client(1) as client:
            chat = ChatClient(
                client, base_url=f"http://127.0.0.1:{port}", model="m", fields={},
                image_max_side=None,
            )  # fmt: skip
            await chat.send(prompt)

    try:
        with pytest.raises(ChatError) as caught:
            asyncio.run(send())
    finally:
        listener.close()
    message = str(caught.value)
    assert message.startswith(
        "the request for item thin-01 (image 1x300 px, prompt 8 characters): "
    ), message
    assert "RemoteProtocolError" in message or "ReadError" in message
