"""Weighing an agent's first call and counting which tools its runs call (the token diet's first checks)."""

from __future__ import annotations

from typing import Any

from stepwise_local.stack import LocalStack
from tests.integration.support import OTHER_KEY, tool, wait_for_run


def http_tool(name: str, description: str) -> dict[str, Any]:
    return tool(name, f"http://127.0.0.1:9/{name}", description=description, read_only=True)


def new_agent(stack: LocalStack, **body: Any) -> str:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "weighed", **body})
    assert status == 201, agent
    return str(agent["agent_id"])


def test_the_weight_splits_the_first_call_into_system_prompt_and_each_tool(stack: LocalStack) -> None:
    tools = [http_tool("small", "Look it up."), http_tool("large", "Look it up. " * 60)]
    agent_id = new_agent(stack, system_prompt="You answer questions about the weather. " * 10, tools=tools)

    status, _, weight = stack.invoke_api("GET", f"/v1/agents/{agent_id}/weight")

    assert status == 200, weight
    assert weight["model"] == "scripted"
    # heaviest first; result_read is declared from every tooled agent's first call, so it weighs too
    assert [t["name"] for t in weight["tools"]] == ["large", "result_read", "small"]
    large, read, small = (t["tokens"] for t in weight["tools"])
    assert large > small + 100 > 100  # 60 repetitions of four words
    assert 40 < read < 100
    assert weight["system_tokens"] > 60
    assert weight["first_call_tokens"] == weight["system_tokens"] + weight["tools_tokens"]
    # A tool weighs what removing it would save; the declarations' shared framing is on top.
    assert large + read + small <= weight["tools_tokens"] <= large + read + small + 20


def test_an_agent_without_prompt_or_tools_weighs_nothing_but_framing(stack: LocalStack) -> None:
    _, _, weight = stack.invoke_api("GET", f"/v1/agents/{new_agent(stack)}/weight")
    assert (weight["system_tokens"], weight["tools_tokens"], weight["tools"]) == (0, 0, [])


def test_another_tenants_agent_has_no_weight_and_no_usage(stack: LocalStack) -> None:
    agent_id = new_agent(stack)
    for path in ("weight", "tool-usage"):
        status, _, body = stack.invoke_api("GET", f"/v1/agents/{agent_id}/{path}", key=OTHER_KEY)
        assert status == 404 and body["error"]["code"] == "agent_not_found"


def test_tool_usage_counts_the_calls_of_the_latest_runs(stack: LocalStack) -> None:
    agent_id = new_agent(stack, tools=[http_tool("used", "Used."), http_tool("idle", "Never called.")])
    calls = [{"name": "used", "arguments": {}}, {"name": "used", "arguments": {"q": 2}}]
    for script in ([{"tool_calls": calls}, {"text": "done"}], [{"text": "no tools"}]):
        body = {"message": "go", "script": script}
        _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", body)
        wait_for_run(stack, accepted["run_id"])

    status, _, usage = stack.invoke_api("GET", f"/v1/agents/{agent_id}/tool-usage?last=10")
    assert status == 200, usage
    assert usage == {
        "runs": 2,
        "tools": [
            {"name": "idle", "declared": True, "calls": 0},
            {"name": "result_read", "declared": True, "calls": 0},
            {"name": "used", "declared": True, "calls": 2},
        ],
    }
    _, _, latest = stack.invoke_api("GET", f"/v1/agents/{agent_id}/tool-usage?last=1")
    assert latest["runs"] == 1 and all(t["calls"] == 0 for t in latest["tools"])  # the text-only run

    assert stack.invoke_api("DELETE", f"/v1/agents/{agent_id}/tools/used")[0] == 204
    _, _, after = stack.invoke_api("GET", f"/v1/agents/{agent_id}/tool-usage")
    assert after["tools"] == [
        {"name": "idle", "declared": True, "calls": 0},
        {"name": "result_read", "declared": True, "calls": 0},
        {"name": "used", "declared": False, "calls": 2},
    ]
    status, _, body = stack.invoke_api("GET", f"/v1/agents/{agent_id}/tool-usage?last=0")
    assert status == 422
