"""A tiny OpenAI-compatible chat server on the standard library, for the server runner's tests.

Streams a fixed answer word by word with a delay per chunk, and can misbehave the ways real
servers do: move to another port when the requested one is busy (ms-swift, with or without
saying so), exit on a busy port (vLLM, LMDeploy), log an engine fallback (LMDeploy), start
slowly. Only for tests of the runner's failure handling; real-path tests use real servers.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--answer", default="hello from the fake server")
    parser.add_argument("--chunk-delay", type=float, default=0.005)
    parser.add_argument("--startup-delay", type=float, default=0.0)
    parser.add_argument("--on-busy", choices=["move", "move-silently", "fail"], default="fail")
    parser.add_argument("--no-usage", action="store_true", help="omit usage from the stream")
    parser.add_argument("--log-line", action="append", default=[], help="print this at start")
    parser.add_argument(
        "--unescaped",
        action="store_true",
        help="write JSON without escaping non-ASCII (as vLLM does): U+2028 travels raw",
    )
    parser.add_argument(
        "--ignore-forcing",
        type=int,
        default=None,
        metavar="TOKENS",
        help="ignore min_tokens / ignore_eos and answer this many tokens whatever is asked",
    )
    # Accepted and ignored, so an engine-looking command line can be passed through.
    parser.add_argument("--backend", default=None)
    return parser.parse_args(argv)


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    for line in args.log_line:
        print(line, file=sys.stderr, flush=True)
    time.sleep(args.startup_delay)
    port = args.port
    if args.on_busy != "fail":
        while not port_is_free(port):
            port += 1

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # As uvicorn does: without it Nagle's algorithm batches the small stream chunks.
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, fmt: str, *values: object) -> None:
            print(fmt % values, file=sys.stderr, flush=True)

        def _json(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": args.model}]})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            if self.path != "/v1/chat/completions" or body.get("model") != args.model:
                self._json(404, {"error": {"message": f"no model {body.get('model')!r}"}})
                return
            content = body["messages"][0]["content"]
            assert content[0]["image_url"]["url"].startswith("data:image/png;base64,")
            limit = int(body.get("max_completion_tokens") or body.get("max_tokens") or 64)
            words = args.answer.split(" ")[:limit]
            # Usage counts two tokens per word (a chunk can carry several tokens), except when
            # the length is forced (ignore_eos, as LMDeploy and vLLM take it): one per chunk.
            tokens = len(words) * 2
            if args.ignore_forcing is not None:  # a server that does not do the forced work
                words = [words[i % len(words)] for i in range(args.ignore_forcing)]
                tokens = args.ignore_forcing
            elif body.get("ignore_eos"):
                words = [words[i % len(words)] for i in range(limit)]
                tokens = limit
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, word in enumerate(words):
                time.sleep(args.chunk_delay)
                text = word if i == 0 else " " + word
                self._chunk({"choices": [{"index": 0, "delta": {"content": text}}]})
            if not args.no_usage:
                self._chunk({"choices": [], "usage": {"completion_tokens": tokens}})
            self._send_raw(b"data: [DONE]\n\n")
            self._send_raw(b"")  # the zero-length chunk ends the chunked body

        def _chunk(self, payload: dict) -> None:
            text = json.dumps(payload, ensure_ascii=not args.unescaped)
            self._send_raw(f"data: {text}\n\n".encode())

        def _send_raw(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)  # busy + "fail": Errno 98
    if args.on_busy != "move-silently":
        print(f"INFO:     Uvicorn running on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
