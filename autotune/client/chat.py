"""One streamed chat completion against an OpenAI-compatible server, timed like in-process runs.

The image travels as a PNG data URL after the same client-side resize the in-process engine
applies, so a server trial sees the very pixels an in-process trial saw.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
from PIL import Image

from autotune.evalset.images import resize_to_max_side
from autotune.measure.repeats import mark_image
from autotune.measure.timing import RequestTiming
from autotune.records import Prompt, Reply


class ChatError(Exception):
    """The server refused a request or broke off its stream."""


def image_data_url(image: Image.Image, max_side: int | None, mark: int | None = None) -> str:
    """The image, shrunk to `max_side` as the in-process engine does (then marked), as a PNG
    data URL."""
    buffer = io.BytesIO()
    # PNG is lossless: the server decodes exactly the pixels the resize produced.
    mark_image(resize_to_max_side(image, max_side), mark).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def chat_body(model: str, prompt: str, image_url: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A streaming chat-completions body; `fields` carries max_tokens and the decoding knobs."""
    return {
        "model": model,
        "messages": [
            {
                "role": "user",
                # Image before text, the order the in-process engine's chat template uses.
                "content": [
                    {"type": "image_url", "image_url": {"url": image_url}},
                    {"type": "text", "text": prompt},
                ],
            }
        ],
        **fields,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _described(prompt: Prompt) -> str:
    """'the request for item ocr-007 (image 1x10000 px, prompt 12 characters)'."""
    width, height = prompt.image.size
    return (
        f"the request for item {prompt.item_id} (image {width}x{height} px, prompt "
        f"{len(prompt.prompt):,} characters)"
    )


class ChatClient:
    """Streams chat completions from `base_url` (http://host:port, without /v1)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        base_url: str,
        model: str,
        fields: dict[str, Any],
        image_max_side: int | None,
        on_chunk: Callable[[float], None] | None = None,
    ) -> None:
        """`on_chunk(instant)` is told of every chunk of text as it arrives (load tests count
        streamed tokens while they run)."""
        self.client = client
        self.url = f"{base_url}/v1/chat/completions"
        self.model = model
        self.fields = fields
        self.image_max_side = image_max_side
        self.on_chunk = on_chunk

    async def send(self, prompt: Prompt, extra_fields: dict[str, Any] | None = None) -> Reply:
        """One streamed answer; `extra_fields` join this request's body only (a load test's
        forced length). A request that fails names its item and image: a server that drops
        the connection ("peer closed connection") says nothing of what it could not take."""
        try:
            return await self._send(prompt, extra_fields)
        except (httpx.HTTPError, ChatError) as exc:
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise ChatError(f"{_described(prompt)}: {why}") from exc

    async def _send(self, prompt: Prompt, extra_fields: dict[str, Any] | None) -> Reply:
        start = time.perf_counter()  # before encoding: the in-process clock starts pre-resize
        # PIL releases the GIL while encoding; a thread keeps other streams' clocks honest.
        image_url = await asyncio.to_thread(
            image_data_url, prompt.image, self.image_max_side, prompt.mark
        )
        fields = {**self.fields, **extra_fields} if extra_fields else self.fields
        body = chat_body(self.model, prompt.prompt, image_url, fields)
        first: float | None = None
        last: float | None = None
        parts: list[str] = []
        arrivals: list[float] = []
        usage_tokens: int | None = None
        async with self.client.stream("POST", self.url, json=body) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode("utf-8", "replace")[:500]
                raise ChatError(f"HTTP {response.status_code} from {self.url}: {detail}")
            async for line in _sse_lines(response):
                payload = _event(line)
                if payload is None:
                    continue
                text = _delta_text(payload)
                if text:
                    last = time.perf_counter()
                    first = first if first is not None else last
                    parts.append(text)
                    arrivals.append(last)
                    if self.on_chunk is not None:
                        self.on_chunk(last)
                usage = payload.get("usage")
                # Some servers repeat a running usage in every chunk: the last one is final.
                if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                    usage_tokens = int(usage["completion_tokens"])
        end = time.perf_counter()
        return Reply(
            item_id=prompt.item_id,
            text="".join(parts).strip(),  # the in-process engine strips its decoded text too
            timing=RequestTiming(
                start=start,
                first_token=first if first is not None else end,
                last_token=last if last is not None else end,
                end=end,
                output_tokens=usage_tokens if usage_tokens is not None else len(parts),
                chunks=len(parts),
                chunk_times=tuple(arrivals),
            ),
        )


_SSE_LINE_END = re.compile(r"\r\n|\r|\n")


async def _sse_lines(response: httpx.Response) -> AsyncIterator[str]:
    """The stream's lines, ended by CR, LF or CRLF as server-sent events define them.

    Not httpx's aiter_lines: it splits like str.splitlines, also at U+0085, U+2028 and
    U+2029, which a server that writes JSON without escaping (ensure_ascii=False) sends raw
    inside a string, so an answer holding one broke its chunk in two."""
    pending = ""
    async for text in response.aiter_text():
        pending += text
        *lines, pending = _SSE_LINE_END.split(pending)
        for line in lines:
            yield line
    if pending:
        yield pending


def _event(line: str) -> dict[str, Any] | None:
    """The JSON payload of one server-sent-events line; None for keep-alives and [DONE]."""
    if not line.startswith("data:"):
        return None
    data = line[len("data:") :].strip()
    if not data or data == "[DONE]":
        return None
    try:
        payload = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ChatError(f"malformed stream chunk: {data[:200]}") from exc
    if not isinstance(payload, dict):
        raise ChatError(f"malformed stream chunk: {data[:200]}")
    if "error" in payload:
        raise ChatError(f"server error in stream: {json.dumps(payload['error'])[:500]}")
    return payload


def _delta_text(payload: dict[str, Any]) -> str:
    choices = payload.get("choices") or []
    if not choices:
        return ""  # the usage-only chunk that include_usage adds at the end
    delta = choices[0].get("delta") or {}
    content = delta.get("content")
    return content if isinstance(content, str) else ""


async def list_models(client: httpx.AsyncClient, base_url: str) -> list[str]:
    """Model ids served at `base_url`; raises httpx errors or ChatError when it cannot say."""
    response = await client.get(f"{base_url}/v1/models")
    if response.status_code != 200:
        raise ChatError(f"GET /v1/models answered HTTP {response.status_code}")
    try:
        data = response.json()["data"]
        return [str(entry["id"]) for entry in data]
    except (ValueError, KeyError, TypeError) as exc:
        raise ChatError("GET /v1/models did not return an OpenAI model list") from exc


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def normalize_base_url(url: str) -> str:
    """http://host:port from a URL given with or without /v1, a trailing slash or http://.

    Raises:
        ValueError: not an http(s) URL with a host (another scheme, no host, a bad port).
    """
    base = url.strip()
    if any(not char.isprintable() or char.isspace() for char in base):
        raise ValueError(f"{url!r} is not a URL: it holds spaces or control characters")
    # The scheme is judged before trailing slashes go: "http://" must not become "http:".
    if not _SCHEME.match(base):
        base = f"http://{base}"  # host:port alone
    parts = urlsplit(base)
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host; write e.g. http://127.0.0.1:8000")
    try:
        port = parts.port  # urlsplit checks the port only when it is read
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError(f"{url!r} has no valid port (1-65535)")
    base = base.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def http_client(concurrency: int) -> httpx.AsyncClient:
    # trust_env=False: a proxy from the environment must never sit between us and the server.
    # connect 60 s: a server that is up but starved of CPU (2 cores under a load of 10) took
    # over 10 s to accept 8 connections at once, and the trial failed (issue 40); one that is
    # gone refuses at once, and a hung one is stopped by trial_timeout_s.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=60.0, read=None, write=60.0, pool=None),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=concurrency),
        trust_env=False,
    )
