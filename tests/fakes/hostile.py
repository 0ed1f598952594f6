"""A hostile HTTP peer on loopback: whatever the request, it answers in the way its path names.

- `/stacked`: `Content-Encoding: gzip, gzip`, a few KB that inflate twice to BOMB_BYTES.
- `/gzip`: one layer of gzip, about BOMB_BYTES / 1000 on the wire, BOMB_BYTES decoded.
- `/trickle`: a valid 200 answer whose header bytes come one every TRICKLE_GAP seconds: each read
  beats any per-read timeout, the whole answer takes TRICKLE_BYTES * TRICKLE_GAP seconds or more.
  Each trickle puts how it ended on `trickles`: "completed", or "hung_up" when the client left first.

The body claims to be JSON, which is what every client here hopes for.
"""

from __future__ import annotations

import functools
import queue
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BOMB_BYTES = 256 * 1024 * 1024
TRICKLE_GAP = 0.2
TRICKLE_BYTES = 40  # of padding header: 8 seconds at least, far beyond the tests' 1-second deadlines
_MIB = b"\0" * (1024 * 1024)


def _gzip(chunks: Any) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return b"".join(packer.compress(chunk) for chunk in chunks) + packer.flush()


@functools.cache
def gzip_bomb() -> bytes:
    return _gzip(_MIB for _ in range(BOMB_BYTES // len(_MIB)))


@functools.cache
def stacked_bomb() -> bytes:
    return _gzip([gzip_bomb()])


class HostilePeer:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.trickles: queue.Queue[str] = queue.Queue()
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                path = self.path.split("?")[0].rstrip("/")
                try:
                    if path.startswith("/trickle"):
                        self._trickle()
                    elif path.startswith("/stacked"):
                        self._encoded(stacked_bomb(), "gzip, gzip")
                    else:
                        self._encoded(gzip_bomb(), "gzip")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up, which is the point

            def _encoded(self, body: bytes, coding: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Encoding", coding)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _trickle(self) -> None:
                body = b'{"ok": true}'
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: "
                try:
                    self.wfile.write(head)
                    for _ in range(TRICKLE_BYTES):
                        if peer.stop.wait(TRICKLE_GAP):
                            return
                        self.wfile.write(b"a")
                        self.wfile.flush()
                    self.wfile.write(b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    peer.trickles.put("hung_up")
                    raise
                peer.trickles.put("completed")
                self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # clients hanging up on a bomb or a trickle is what the tests want

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
