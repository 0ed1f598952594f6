"""A webhook receiver on loopback: the peer for custom HTTP tools (and later hooks). It records every
request and answers with whatever the test scripted for its path."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)  # when it arrived

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True})
    delay: float = 0.0
    content_type: str = "application/json"


class Receiver:
    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.replies: dict[str, Reply] = {}
        self.once: dict[str, list[Reply]] = {}  # answered first, one each, before `replies` apply
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?")[0]
                with receiver._lock:
                    receiver.requests.append(
                        Received(
                            self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                        )
                    )
                with receiver._lock:
                    queued = receiver.once.get(path)
                    reply = queued.pop(0) if queued else receiver.replies.get(path, Reply())
                if reply.delay:
                    time.sleep(reply.delay)
                payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def then(self, path: str, *replies: Reply) -> None:
        """Answer the next requests to `path` with `replies`, in order, then as before."""
        with self._lock:
            self.once.setdefault(path, []).extend(replies)

    def to(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path.split("?")[0] == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
