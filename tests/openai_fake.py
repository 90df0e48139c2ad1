"""A local HTTP server speaking the OpenAI Chat Completions wire format, for tests of
everything that talks to a model (the agent's provider, auto mode's classifier)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted HTTP answer."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] | None = None  # SSE: written one by one, then the connection closes


@dataclass
class FakeServer:
    url: str
    replies: list[Reply]
    requests: list[dict[str, Any]]


def completion(message: dict[str, Any], usage: tuple[int, int] = (11, 7)) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": sum(usage),
            },
        }
    ).encode()


def sse(*events: dict[str, Any] | str) -> list[bytes]:
    return [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events]


@contextmanager
def fake_openai_server(delay_s: float = 0.0) -> Iterator[FakeServer]:
    """Serve scripted replies (FakeServer.replies, in order) on 127.0.0.1; every request
    is recorded. ``delay_s`` holds each answer back (for timeouts)."""
    replies: list[Reply] = []
    requests: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            requests.append(
                {
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": json.loads(self.rfile.read(length)),
                }
            )
            reply = replies.pop(0) if replies else Reply(500, b'{"error":{"message":"no script"}}')
            if delay_s:
                threading.Event().wait(delay_s)
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.chunks is None:
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
                return
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in reply.chunks:
                self.wfile.write(chunk)
                self.wfile.flush()
            self.close_connection = True

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield FakeServer(f"http://127.0.0.1:{httpd.server_address[1]}/v1", replies, requests)
    httpd.shutdown()
    httpd.server_close()
    thread.join()
