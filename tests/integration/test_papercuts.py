"""The API read as a client author reads it (issue 29): one shape for one thing, statuses the spec
declares, lists that page to their end."""

from __future__ import annotations

from typing import Any

from stepwise_local.stack import LocalStack


def create_agent(stack: LocalStack, **fields: Any) -> str:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "papercuts", **fields})
    assert status == 201, agent
    return str(agent["agent_id"])


def sync_run(stack: LocalStack, agent_id: str, **fields: Any) -> tuple[int, dict[str, Any]]:
    status, _, body = stack.invoke_api("POST", f"/v1/agents/{agent_id}/run", {"message": "ping", **fields})
    return status, body


def test_a_status_filter_fills_its_pages(stack: LocalStack) -> None:
    """One succeeded run under newer failed ones: a page of one succeeded run is that run, not an empty
    page with a token (DynamoDB's Limit counts the runs read, before the filter)."""
    agent_id = create_agent(stack)
    status, first = sync_run(stack, agent_id)
    assert status == 200, first
    stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", {"model": "no-such-provider/x"})
    for _ in range(3):
        assert sync_run(stack, agent_id)[0] == 502

    status, _, page = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}&status=succeeded&limit=1")

    assert status == 200, page
    assert [r["run_id"] for r in page["runs"]] == [first["run_id"]]
    assert page["next_token"] is None
    print(page)
