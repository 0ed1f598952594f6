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
