"""The MCP door's translation where no store is involved (stepwise.protocols.mcp_server, mcp_runs): the
transport's envelope, version negotiation, tool names, tasks as the runs' states; every result checked
against the 2025-11-25 wire schema of the SDK's own types."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp_types import methods

from stepwise.interactions.models import Interaction
from stepwise.protocols import mcp_runs, mcp_server
from stepwise.runs.models import Run, RunError

SSE = {"accept": "application/json, text/event-stream"}
HELLO = {"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
AGENT = "agt_01ARZ3NDEKTSV4RRFFQ69G5FAV"
AT = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def post(body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    raw = body if isinstance(body, str) else json.dumps(body)
    reply = mcp_server.handle("tenant-t", raw, headers if headers is not None else SSE)
    return reply.status, json.loads(reply.body) if reply.body else None


def request(method: str, params: dict[str, Any] | None = None, **headers: str) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        body["params"] = params
    status, answer = post(body, {**SSE, **headers})
    assert status == 200 and answer["id"] == 7
    return dict(answer)


@pytest.mark.parametrize(
    ("asked", "agreed"),
    [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2024-11-05"),
        ("1999-01-01", "2025-11-25"),
    ],
)
def test_initialize_settles_on_the_clients_version_when_served_else_the_newest(
    asked: str, agreed: str
) -> None:
    result = request("initialize", {"protocolVersion": asked, **HELLO})["result"]

    assert result["protocolVersion"] == agreed
    methods.validate_server_result("initialize", agreed, result)
    assert ("tasks" in result["capabilities"]) == (agreed == "2025-11-25")
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert "resultType" not in result


def test_ping_is_empty_and_unknown_methods_are_method_not_found() -> None:
    assert request("ping")["result"] == {}
    for method in ("prompts/list", "resources/list", "logging/setLevel", "server/discover"):
        assert request(method)["error"]["code"] == -32601


def test_bad_params_are_invalid_params_with_what_is_wrong() -> None:
    error = request("initialize", {"protocolVersion": 3})["error"]
    assert error["code"] == -32602 and error["data"]
    assert request("tasks/get", {"taskId": "not-a-run-id"})["error"] == {
        "code": -32602,
        "message": "Failed to retrieve task: Task not found",
    }
    assert request("tools/call", {"name": "no_agent_id_here", "arguments": {}})["error"]["code"] == -32602
    assert request("tools/list", {"cursor": "%%%"})["error"]["code"] == -32602


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("{not json", -32700),
        ("", -32700),
        ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], -32600),  # batches were dropped in 2025-06-18
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, -32600),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, -32600),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, -32600),
    ],
)
def test_what_is_not_one_json_rpc_request_is_400_with_the_error(body: Any, code: int) -> None:
    status, answer = post(body)

    assert status == 400 and answer == {"jsonrpc": "2.0", "id": None, "error": answer["error"]}
    assert answer["error"]["code"] == code


def test_notifications_and_responses_are_accepted_without_a_body() -> None:
    for body in (
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
        {"jsonrpc": "2.0", "id": 3, "result": {}},
    ):
        reply = mcp_server.handle("tenant-t", json.dumps(body), SSE)
        assert reply.status == 202 and reply.body is None


def test_an_unsupported_protocol_version_header_is_400_naming_the_supported_ones() -> None:
    status, answer = post(
        {"jsonrpc": "2.0", "id": 1, "method": "ping"}, {**SSE, "mcp-protocol-version": "2026-07-28"}
    )

    assert status == 400 and answer["error"]["code"] == -32022
    assert answer["error"]["data"] == {
        "supported": list(mcp_server.PROTOCOL_VERSIONS),
        "requested": "2026-07-28",
    }


@given(st.text(max_size=300))
def test_a_tool_name_is_valid_for_any_agent_name_and_ends_with_its_id(name: str) -> None:
    tool = mcp_server.tool_name(name, AGENT)

    assert TOOL_NAME.match(tool) and tool.endswith(f"__{AGENT}")


def test_a_tool_name_reads_like_the_agent() -> None:
    assert mcp_server.tool_name("Support Bot (EU) v2", AGENT) == f"support_bot_eu_v2__{AGENT}"
    assert mcp_server.tool_name("☃", AGENT) == f"agent__{AGENT}"


def a_run(status: str, **fields: Any) -> Run:
    return Run(
        run_id="run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        agent_id=AGENT,
        session_id="ses_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        status=status,
        input="hi",
        created_at=AT,
        **fields,
    )


def an_approval(arguments: dict[str, Any]) -> Interaction:
    return Interaction(
        interaction_id="int_01ARZ3NDEKTSV4RRFFQ69G5FAV_1_0",
        run_id="run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        session_id="ses_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        agent_id=AGENT,
        kind="approval",
        status="pending",
        step=1,
        tool_call_id="call_1",
        tool_call_index=0,
        tool_name="send_email",
        arguments=arguments,
        digest="d",
        timeout_seconds=300,
        created_at=AT + timedelta(seconds=5),
        deadline=AT + timedelta(minutes=5),
    )


@pytest.mark.parametrize(
    ("status", "fields", "task_status"),
    [
        ("queued", {}, "working"),
        ("running", {"steps": 2}, "working"),
        ("waiting", {}, "working"),  # on a child, a budget or a provider: nobody to ask
        ("succeeded", {"output": "ok", "finished_at": AT}, "completed"),
        ("failed", {"error": RunError(code="doom_loop", message="x"), "finished_at": AT}, "failed"),
        ("timed_out", {"error": RunError(code="timed_out", message="x"), "finished_at": AT}, "failed"),
        ("cancelled", {"error": RunError(code="cancelled", message="x"), "finished_at": AT}, "cancelled"),
    ],
)
def test_a_runs_status_is_its_tasks(status: str, fields: dict[str, Any], task_status: str) -> None:
    task = mcp_runs.task_dump(a_run(status, **fields), [])

    assert task["status"] == task_status and task["taskId"] == "run_01ARZ3NDEKTSV4RRFFQ69G5FAV"
    assert task["ttl"] is None and task["createdAt"] == "2026-12-03T12:00:00.000Z"
    assert ("pollInterval" in task) == (task_status in ("working", "input_required"))


def test_a_run_waiting_on_an_approval_is_input_required_saying_what_and_how_to_answer() -> None:
    hidden = "rm -rf /\u202e"  # a right-to-left override must show, as on the approval page
    task = mcp_runs.task_dump(a_run("waiting"), [an_approval({"to": "a@example.com", "cmd": hidden})])

    message = task["statusMessage"]
    assert task["status"] == "input_required" and task["lastUpdatedAt"] == "2026-12-03T12:00:05.000Z"
    assert "int_01ARZ3NDEKTSV4RRFFQ69G5FAV_1_0" in message and "send_email" in message
    assert "POST /v1/sessions/interactions/int_01ARZ3NDEKTSV4RRFFQ69G5FAV_1_0/respond" in message
    assert "\\u202e" in message and "\u202e" not in message


def test_a_finished_runs_result_is_the_tool_result_and_a_failure_is_an_error_result() -> None:
    done = mcp_runs.dump(mcp_runs.tool_result(a_run("succeeded", output="hello", finished_at=AT)))
    failed = mcp_runs.dump(
        mcp_runs.tool_result(
            a_run("failed", error=RunError(code="budget_exceeded", message="over"), finished_at=AT)
        )
    )

    for result in (done, failed):
        methods.validate_server_result("tools/call", "2025-11-25", result)
        assert "resultType" not in result
    assert done["content"] == [{"type": "text", "text": "hello"}] and not done["isError"]
    assert failed["isError"] and "budget_exceeded" in failed["content"][0]["text"]
    assert failed["structuredContent"]["error"] == {"code": "budget_exceeded", "message": "over"}
