"""A reverse proxy on loopback in front of the local stack, for clients that must survive a bad network:
it records every request, answers chosen ones itself (a 503, a 429 with Retry-After) without forwarding
them, and cuts the connections in flight on demand (a load balancer restarting, Wi-Fi dropping)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    answered_by_proxy: bool = False


@dataclass
class Fault:
    method: str
    path: str
    status: int
    times: int
    headers: dict[str, str] = field(default_factory=dict)
    forward: bool = False  # the upstream gets the request and acts on it; its answer is lost
    body: Any = field(default_factory=lambda: {"message": "Service Unavailable"})


class Proxy:
    def __init__(self, upstream: str) -> None:
        self.requests: list[Seen] = []
        self._faults: list[Fault] = []
        self._open: set[socket.socket] = set()
        self._in_flight: list[Seen] = []
        self._lock = threading.Lock()
        self._upstream = httpx.Client(base_url=upstream, timeout=90)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                seen = Seen(
                    self.command,
                    parts.path,
                    {k: v[0] for k, v in parse_qs(parts.query).items()},
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                )
                with proxy._lock:
                    proxy.requests.append(seen)
                    fault = proxy._take_fault(self.command, parts.path)
                    proxy._open.add(self.connection)
                    proxy._in_flight.append(seen)
                try:
                    headers = {
                        k: v for k, v in self.headers.items() if k.lower() not in {"host", *HOP_BY_HOP}
                    }
                    if fault is not None:
                        if fault.forward:
                            proxy._upstream.request(self.command, self.path, content=body, headers=headers)
                        seen.answered_by_proxy = True
                        self._reply(fault.status, fault.headers, json.dumps(fault.body).encode())
                        return
                    answer = proxy._upstream.request(self.command, self.path, content=body, headers=headers)
                    kept = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
                    self._reply(answer.status_code, kept, answer.content)
                except OSError:
                    pass  # the connection was cut while the upstream answered
                finally:
                    with proxy._lock:
                        proxy._open.discard(self.connection)
                        proxy._in_flight.remove(seen)

            def _reply(self, status: int, headers: dict[str, str], content: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True, name="proxy").start()

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
        forward: bool = False,
    ) -> None:
        """The next `times` requests of `method path` are answered `status` by the proxy: not forwarded,
        or with `forward` forwarded first and the upstream's answer dropped (a lost response)."""
        with self._lock:
            self._faults.append(Fault(method, path, status, times, headers or {}, forward))

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self._faults:
            if fault.method == method and fault.path == path and fault.times > 0:
                fault.times -= 1
                return fault
        return None

    def in_flight(self, method: str, path: str) -> list[Seen]:
        with self._lock:
            return [s for s in self._in_flight if s.method == method and s.path == path]

    def cut(self) -> int:
        """Resets every connection with a request in flight; returns how many it cut."""
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):  # closed by its handler meanwhile
                sock.shutdown(socket.SHUT_RDWR)
        return len(sockets)

    def sent(self, method: str, path: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.requests if s.method == method and s.path == path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._upstream.close()
