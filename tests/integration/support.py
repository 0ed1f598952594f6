"""Helpers for integration tests that drive runs through the local stack."""

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stepwise_local.gateway import Gateway, serve
from stepwise_local.stack import LocalStack
from tests.eventually import eventually

OTHER_KEY = "sk-other-tenant"
CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


@contextmanager
def served(gateway: Gateway) -> Iterator[str]:
    """The gateway over real HTTP on a free loopback port, for the official clients: its base URL."""
    server = serve(gateway, port=0, quiet=True)
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()


def node() -> str:
    """Node 22 from tests/conformance's lock (the JS clients and the MCP suite run on it), else PATH's."""
    pinned = CONFORMANCE / "node_modules" / ".bin" / "node"
    found = str(pinned) if pinned.exists() else shutil.which("node")
    assert found, "node is needed (npm ci --prefix tests/conformance)"
    return found


def wait_for_run(
    stack: LocalStack, run_id: str, timeout: float = 60.0, key: str | None = None
) -> dict[str, Any]:
    """The run once it has left queued/running/waiting; a timeout shows its last state."""
    kwargs = {"key": key} if key else {}

    def ended() -> dict[str, Any]:
        status, _, run = stack.invoke_api("GET", f"/v1/runs/{run_id}", **kwargs)
        assert status == 200, run
        assert run["status"] not in ("queued", "running", "waiting"), f"run still {run['status']}: {run}"
        return dict(run)

    return eventually(ended, timeout=timeout, what=f"run {run_id} to end")


def tool(name: str, url: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "name": name,
        "description": f"{name} tool",
        "input_schema": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
        },
        "endpoint": url,
        **extra,
    }


@contextmanager
def answer_lost_once(operation: str, table: str) -> Iterator[list[str]]:
    """The first `operation` (e.g. "UpdateItem") on `table` is applied by moto, then its answer is lost:
    botocore gets a read timeout and retries it, as it would against DynamoDB. Yields the URLs faulted."""
    from botocore.exceptions import ReadTimeoutError
    from moto.core.botocore_stubber import BotocoreStubber

    original = BotocoreStubber.__call__
    lost: list[str] = []

    def call(stubber: Any, event_name: str, request: Any, **kwargs: Any) -> Any:
        response = original(stubber, event_name, request, **kwargs)
        target = str(request.headers.get("X-Amz-Target", ""))
        if not lost and f".{operation}" in target and table.encode() in (request.body or b""):
            lost.append(str(request.url))
            raise ReadTimeoutError(endpoint_url=str(request.url))
        return response

    BotocoreStubber.__call__ = call  # type: ignore[method-assign]
    try:
        yield lost
    finally:
        BotocoreStubber.__call__ = original  # type: ignore[method-assign]
