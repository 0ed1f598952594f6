"""Helpers for integration tests that drive runs through the local stack."""

import time
from typing import Any

from stepwise_local.stack import LocalStack

OTHER_KEY = "sk-other-tenant"


def wait_for_run(
    stack: LocalStack, run_id: str, timeout: float = 60.0, key: str | None = None
) -> dict[str, Any]:
    """Poll the run until it leaves queued/running, or fail with its last state."""
    deadline = time.monotonic() + timeout
    kwargs = {"key": key} if key else {}
    while True:
        status, _, run = stack.invoke_api("GET", f"/v1/runs/{run_id}", **kwargs)
        assert status == 200, run
        if run["status"] not in ("queued", "running", "waiting"):
            return run
        assert time.monotonic() < deadline, f"run still {run['status']} after {timeout}s: {run}"
        time.sleep(0.05)


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
