"""Helpers for integration tests that drive runs through the local stack."""

from typing import Any

from stepwise_local.stack import LocalStack
from tests.eventually import eventually

OTHER_KEY = "sk-other-tenant"


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
