"""An MCP server on loopback, built with the official SDK (`MCPServer`, FastMCP's name in mcp 2) and served
over streamable HTTP by uvicorn in a background thread.

Tools: `lookup(q)` (readOnlyHint), `delete_item(id)` (destructiveHint), `fail()` (raises, so the result
has isError), with `orders` set, `orders(count)` (readOnlyHint: a JSON array of `count` records), and
with `image` given, `snapshot()` (read-only: a caption and that PNG). With `api_key` set, every request
must carry `X-Api-Key: <api_key>` or gets a 401, so tests can prove the configured headers are sent.
`calls` records each tool call as (tool, arguments).
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import uvicorn
from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.eventually import eventually

API_KEY_HEADER = "X-Api-Key"


class FakeMcpServer:
    def __init__(
        self, *, api_key: str | None = None, image: bytes | None = None, orders: bool = False
    ) -> None:
        self.api_key = api_key
        self.image = image
        self.orders = orders
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.requests = 0  # HTTP requests that reached the server, refused ones included
        self._lock = threading.Lock()
        app = self._guarded(self._build().streamable_http_app())
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="on"))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True, name="fake-mcp"
        )
        self._thread.start()
        eventually(self._started, timeout=10, interval=0.01, what="the fake MCP server to start")

    def _started(self) -> bool:
        if not self._thread.is_alive():
            raise RuntimeError("the fake MCP server stopped before it started")
        return bool(self._server.started)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def tool_calls(self, tool: str) -> list[dict[str, Any]]:
        with self._lock:
            return [arguments for name, arguments in self.calls if name == tool]

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def _record(self, tool: str, arguments: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append((tool, arguments))

    def _build(self) -> MCPServer:
        server = MCPServer("fake-mcp")

        @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
        def lookup(q: str) -> str:
            """Look up a term in the fake catalogue."""
            self._record("lookup", {"q": q})
            return f"found: {q}"

        @server.tool(annotations=ToolAnnotations(destructive_hint=True))
        def delete_item(id: str) -> str:
            """Delete an item from the fake catalogue."""
            self._record("delete_item", {"id": id})
            return f"deleted {id}"

        @server.tool()
        def fail() -> str:
            """Always fails."""
            self._record("fail", {})
            raise ToolError("the fake tool failed on purpose")

        if self.image is not None:
            picture = self.image

            @server.tool(annotations=ToolAnnotations(read_only_hint=True))
            def snapshot() -> list[str | Image]:
                """Take a picture of the fake catalogue."""
                self._record("snapshot", {})
                return ["the catalogue, photographed", Image(data=picture, format="png")]

        if self.orders:

            @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
            def orders(count: int) -> str:
                """The fake catalogue's orders, as a JSON array of records."""
                self._record("orders", {"count": count})
                rows = [
                    {"order_id": f"o-{i:04d}", "region": ("north", "south")[i % 2], "amount": i}
                    for i in range(count)
                ]
                return json.dumps(rows)

        return server

    def _guarded(self, app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                with self._lock:
                    self.requests += 1
                sent = dict(scope["headers"]).get(API_KEY_HEADER.lower().encode())
                if self.api_key is not None and sent != self.api_key.encode():
                    await JSONResponse({"error": "bad api key"}, status_code=401)(scope, receive, send)
                    return
            await app(scope, receive, send)

        return guarded
