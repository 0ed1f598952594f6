"""POST /v1/mcp driven by the official `mcp` client (streamable HTTP) against the local stack over
loopback HTTP: agents listed as tools, called, failed, followed as tasks through an approval answered
with the API's respond route, cancelled, listed, with progress; and another tenant sees none of it.

The SDK's typed session has no task-augmented call in 2.3.0 (tasks are types-only there), so a call as
a task goes out raw through the same client's JSON-RPC dispatcher; tasks/* go through the session's
`send_request` with the SDK's own request and result models."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import httpx2
import mcp.types as types
import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from stepwise.protocols import mcp_server
from stepwise_local.gateway import Gateway, Response
from stepwise_local.stack import DEFAULT_KEY, LocalStack
from tests.conformance.test_conformance import suite
from tests.eventually import eventually
from tests.fakes.receiver import Receiver
from tests.integration.support import OTHER_KEY, served, tool

T = TypeVar("T")
Work = Callable[[ClientSession, JSONRPCDispatcher], Awaitable[T]]
ASK = [{"tool_calls": [{"name": "send", "arguments": {"q": "hello"}}]}, {"text": "sent it"}]
LOOKUP = [{"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}, {"text": "found it"}]


@dataclass
class Door:
    url: str
    stack: LocalStack
    tools: dict[str, str]  # role → tool name

    def run(self, work: Work[T], key: str = DEFAULT_KEY) -> T:
        """`work` on a freshly initialized session of the official client (the server is stateless:
        a connection per step costs an initialize and nothing else)."""

        async def main() -> T:
            async with connected(self.url, key) as (session, dispatcher):
                return await work(session, dispatcher)

        try:
            return anyio.run(main)
        except BaseExceptionGroup as group:
            raise _sole(group) from None


def _sole(error: BaseException) -> BaseException:
    """What the work raised, out of the task groups of the client that wrap it."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


@asynccontextmanager
async def connected(url: str, key: str) -> AsyncIterator[tuple[ClientSession, JSONRPCDispatcher]]:
    auth = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=auth, timeout=httpx2.Timeout(30, read=60)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
    ):
        dispatcher: JSONRPCDispatcher = JSONRPCDispatcher(read, write)
        async with ClientSession(dispatcher=dispatcher) as session:
            await session.initialize()
            yield session, dispatcher


def agent(stack: LocalStack, key: str = DEFAULT_KEY, **fields: Any) -> str:
    """A new agent's tool name."""
    status, _, made = stack.invoke_api("POST", "/v1/agents", fields, key=key)
    assert status == 201, made
    return mcp_server.tool_name(made["name"], made["agent_id"])


@pytest.fixture(scope="module")
def door(stack: LocalStack) -> Iterator[Door]:
    peer = Receiver()
    on = {"enabled": True}
    names = {
        "echo": agent(stack, name="Echo Bot", mcp=on, script=[{"text": "hello from echo"}]),
        "lookup": agent(
            stack, name="Looker", mcp=on, script=LOOKUP, tools=[tool("lookup", f"{peer.url}/lookup")]
        ),
        "broke": agent(stack, name="Broke", mcp=on, max_tokens_budget=1),
        "approver": agent(
            stack,
            name="Approver",
            mcp=on,
            script=ASK,
            tools=[tool("send", f"{peer.url}/send", permission="ask")],
        ),
        "closed": agent(stack, name="Closed", script=[{"text": "never"}]),
        "helper": agent(stack, name="helper", mcp=on, script=[{"text": "Sunny in Paris."}]),
        "other": agent(stack, OTHER_KEY, name="Theirs", mcp=on, script=[{"text": "theirs"}]),
    }
    with served(stack.gateway) as url:
        yield Door(f"{url}/v1/mcp", stack, names)
    peer.close()


def test_the_default_client_connects_and_lists_only_this_tenants_enabled_agents(door: Door) -> None:
    async def main() -> tuple[types.InitializeResult | None, list[types.Tool], list[types.Tool]]:
        auth = {"Authorization": f"Bearer {DEFAULT_KEY}"}
        # mode "auto" (the default) probes 2026-07-28's server/discover first: refused with the
        # versions we speak, it falls back to the initialize handshake.
        async with (
            httpx2.AsyncClient(headers=auth) as http,
            Client(streamable_http_client(door.url, http_client=http)) as client,
        ):
            mine = (await client.list_tools()).tools
            initialized = client.session.initialize_result
        async with connected(door.url, OTHER_KEY) as (session, _):
            theirs = (await session.list_tools()).tools
        return initialized, mine, theirs

    initialized, mine, theirs = anyio.run(main)

    assert initialized is not None and initialized.protocol_version == "2025-11-25"
    assert initialized.capabilities.tasks is not None and initialized.capabilities.tasks.requests is not None
    names = {t.name for t in mine}
    assert {door.tools[r] for r in ("echo", "lookup", "broke", "approver")} <= names
    assert door.tools["closed"] not in names and door.tools["other"] not in names
    echo = next(t for t in mine if t.name == door.tools["echo"])
    assert echo.title == "Echo Bot" and echo.description
    assert echo.input_schema["required"] == ["message"] and "session_id" in echo.input_schema["properties"]
    assert echo.execution is not None and echo.execution.task_support == "optional"
    assert [t.name for t in theirs] == [door.tools["other"]]


def test_tools_are_listed_in_pages_whose_cursors_lead_through_all_of_them(door: Door) -> None:
    async def pages(session: ClientSession, _: JSONRPCDispatcher) -> list[list[str]]:
        found, cursor = [], None
        while True:
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
            found.append([t.name for t in page.tools])
            cursor = page.next_cursor
            if cursor is None:
                return found

    whole = door.run(pages)
    page_size = mcp_server.PAGE
    mcp_server.PAGE = 2  # the stack serves in this process: pages of two
    try:
        paged = door.run(pages)
    finally:
        mcp_server.PAGE = page_size

    names = [name for page in whole for name in page]
    assert len(names) >= 5 and len(paged) == -(-len(names) // 2)
    assert all(len(page) == 2 for page in paged[:-1])
    assert [name for page in paged for name in page] == names


def test_a_call_answers_with_the_final_text_and_continues_its_session(door: Door) -> None:
    name = door.tools["echo"]

    async def work(session: ClientSession, _: JSONRPCDispatcher) -> list[types.CallToolResult]:
        first = await session.call_tool(name, {"message": "hi"})
        assert first.structured_content is not None
        again = {"message": "again", "session_id": first.structured_content["session_id"]}
        return [first, await session.call_tool(name, again)]

    first, second = door.run(work)

    assert not first.is_error and first.content == [types.TextContent(type="text", text="hello from echo")]
    answer = first.structured_content
    assert answer is not None and answer["status"] == "succeeded" and answer["output"] == "hello from echo"
    assert second.structured_content is not None
    assert second.structured_content["session_id"] == answer["session_id"]
    status, _, run = door.stack.invoke_api("GET", f"/v1/runs/{answer['run_id']}")
    assert status == 200 and run["output"] == "hello from echo" and run["session_id"] == answer["session_id"]


def test_a_failed_run_is_an_error_result(door: Door) -> None:
    result = door.run(lambda session, _: session.call_tool(door.tools["broke"], {"message": "hi"}))

    assert result.is_error
    assert result.structured_content is not None and result.structured_content["status"] == "failed"
    assert result.structured_content["error"]["code"] == "budget_exceeded"
    assert isinstance(result.content[0], types.TextContent) and "budget_exceeded" in result.content[0].text


def test_what_is_not_a_tool_or_not_a_call_is_the_protocols_error(door: Door) -> None:
    async def codes(session: ClientSession, _: JSONRPCDispatcher) -> list[int]:
        found = []
        calls: list[tuple[str, dict[str, Any]]] = [
            ("nope", {"message": "hi"}),
            (door.tools["closed"], {"message": "hi"}),
            (door.tools["other"], {"message": "hi"}),  # another tenant's agent
            (door.tools["echo"], {}),
            (door.tools["echo"], {"message": "hi", "extra": 1}),
            (door.tools["echo"], {"message": "hi", "session_id": "ses_01ARZ3NDEKTSV4RRFFQ69G5FAV"}),
            (door.tools["echo"], {"message": "\U0001f600" * 80_000}),  # under 100k characters, over 300 KB
        ]
        for name, arguments in calls:
            with pytest.raises(MCPError) as raised:
                await session.call_tool(name, arguments)
            found.append(raised.value.error.code)
        with pytest.raises(MCPError) as raised:
            await session.list_prompts()
        return [*found, raised.value.error.code]

    assert door.run(codes) == [-32602] * 7 + [-32601]

    malformed = httpx.post(door.url, content=b"{not json", headers={"Authorization": f"Bearer {DEFAULT_KEY}"})
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == -32700
    unauthorized = httpx.post(door.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert unauthorized.status_code == 401


def test_a_blocking_call_sends_progress_while_it_waits(door: Door) -> None:
    seen: list[tuple[float, str | None]] = []

    async def work(session: ClientSession, _: JSONRPCDispatcher) -> types.CallToolResult:
        async def progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, message))

        return await session.call_tool(door.tools["lookup"], {"message": "find"}, progress_callback=progress)

    result = door.run(work)

    assert result.content == [types.TextContent(type="text", text="found it")]
    values = [value for value, _ in seen]
    assert len(seen) >= 4 and values == sorted(values) and len(set(values)) == len(values)
    messages = [m or "" for _, m in seen]
    assert messages[0].startswith("run run_") and "calling lookup" in messages
    assert messages[-1] == "run completed"


def test_a_task_waits_on_an_approval_answered_through_the_api_then_completes(door: Door) -> None:
    name = door.tools["approver"]

    async def call_as_task(session: ClientSession, dispatcher: JSONRPCDispatcher) -> types.CreateTaskResult:
        raw = await dispatcher.send_raw_request(
            "tools/call", {"name": name, "arguments": {"message": "send it"}, "task": {"ttl": 60000}}, {}
        )
        return types.CreateTaskResult.model_validate(raw)

    created = door.run(call_as_task)
    task_id = created.task.task_id
    assert created.task.status == "working" and task_id.startswith("run_")

    def get(session: ClientSession, _: JSONRPCDispatcher) -> Awaitable[types.GetTaskResult]:
        request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
        return session.send_request(request, types.GetTaskResult)

    def asks() -> types.GetTaskResult:
        task = door.run(get)
        assert task.status == "input_required", task
        return task

    waiting = eventually(asks, timeout=30, what="the task to wait on the approval")
    assert waiting.status_message is not None
    (interaction_id,) = [w for w in waiting.status_message.split() if w.startswith("int_")][:1]
    assert f"/v1/sessions/interactions/{interaction_id}/respond" in waiting.status_message

    # A blocking call on the same session is queued behind the task: it answers with the run to follow.
    session_id = door.stack.invoke_api("GET", f"/v1/runs/{task_id}")[2]["session_id"]
    queued = _still_running(door, name, {"message": "and again", "session_id": session_id})
    assert queued["task"]["status"] == "working" and queued["session_id"] == session_id

    status, _, answered = door.stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{interaction_id}/respond",
        {"answer": {"approved": True}},
        headers={"Idempotency-Key": "mcp-door-approve"},
    )
    assert status == 202, answered

    def result(session: ClientSession, _: JSONRPCDispatcher) -> Awaitable[types.CallToolResult]:
        request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
        return session.send_request(request, types.CallToolResult)

    final = door.run(result)
    assert final.content == [types.TextContent(type="text", text="sent it")] and not final.is_error
    assert final.meta == {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
    assert door.run(get).status == "completed"

    # The queued run went on after the task; it now waits on its own approval: cancel it as a task.
    def cancel(session: ClientSession, _: JSONRPCDispatcher) -> Awaitable[types.CancelTaskResult]:
        request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=queued["run_id"]))
        return session.send_request(request, types.CancelTaskResult)

    assert door.run(cancel).status == "cancelled"
    with pytest.raises(MCPError) as again:
        door.run(cancel)
    assert again.value.error.code == -32602

    def listed(session: ClientSession, _: JSONRPCDispatcher) -> Awaitable[types.ListTasksResult]:
        return session.send_request(types.ListTasksRequest(), types.ListTasksResult)

    statuses = {t.task_id: t.status for t in door.run(listed).tasks}
    assert statuses[task_id] == "completed" and statuses[queued["run_id"]] == "cancelled"

    # Another tenant: the same ids are not found, and not listed.
    for work in (get, result, cancel):
        with pytest.raises(MCPError) as hidden:
            door.run(work, key=OTHER_KEY)
        assert hidden.value.error.code == -32602 and "not found" in hidden.value.error.message
    assert task_id not in {t.task_id for t in door.run(listed, key=OTHER_KEY).tasks}


def _still_running(door: Door, name: str, arguments: dict[str, Any], wait: float = 1.0) -> dict[str, Any]:
    """A blocking call that does not end within the wait (shortened to `wait`): the error's data."""

    async def call(session: ClientSession, _: JSONRPCDispatcher) -> types.CallToolResult:
        return await session.call_tool(name, arguments)

    call_wait = mcp_server.CALL_WAIT
    mcp_server.CALL_WAIT = wait  # the stack serves in this process: the door's wait, shortened
    try:
        with pytest.raises(MCPError) as raised:
            door.run(call)
    finally:
        mcp_server.CALL_WAIT = call_wait
    error = raised.value.error
    assert error.code == mcp_server.STILL_RUNNING and isinstance(error.data, dict), error
    assert error.data["run_id"] in error.message
    return json.loads(json.dumps(error.data))


def test_the_readmes_example_works(door: Door) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### MCP server", 1)[1].split("\n## ", 1)[0]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    printed: list[tuple[Any, ...]] = []
    run_as_written = {"print": lambda *values: printed.append(values)}  # the stack logs on stdout too

    exec(
        compile(example.replace("http://127.0.0.1:3000", door.url.removesuffix("/v1/mcp")), "README", "exec"),
        run_as_written,
    )

    ((text, answer),) = printed
    assert (
        text == "Sunny in Paris." and answer["status"] == "succeeded" and answer["run_id"].startswith("run_")
    )


# --- The official conformance suite's server scenarios ---------------------------------------------

FIXTURE_TOOL = ("FAILURE", "Unknown tool: test_")
NOT_SERVED = ("FAILURE", "Method not found")
# Every server scenario of the pinned suite (`--suite all`: the active ones and the pending), each with
# the checks that fail or warn and a piece of the reason the suite gives; an empty dict passes.
# The scenarios are written against the suite's own "everything" server: its fixture tools
# (test_simple_text, test_image_content…), prompts, resources, logging and completion. Stepwise's
# tools are the tenant's agents, and it serves tools only, so those fail for that reason and no other.
SERVER_SCENARIOS: dict[str, dict[tuple[str, str], str]] = {
    "server-initialize": {},
    "ping": {},
    "tools-list": {},
    # Stateless: no Mcp-Session-Id, so the suite's session-based SSE checks only warn and stop there.
    "server-sse-multiple-streams": {("server-sse-multiple-streams-session", "WARNING"): ""},
    "server-sse-polling": {("server-sse-polling-session", "WARNING"): ""},
    # A remote server behind an API key: the Host/Origin rule is for unauthenticated localhost servers
    # (here the key is injected by the loopback wrapper below, so the request is let through).
    "dns-rebinding-protection": {("localhost-host-rebinding-rejected", "FAILURE"): "got 200"},
    "json-schema-2020-12": {("json-schema-2020-12-tool-found", "FAILURE"): "not found"},
    **{
        name: {(name, FIXTURE_TOOL[0]): FIXTURE_TOOL[1]}
        for name in (
            "tools-call-simple-text",
            "tools-call-image",
            "tools-call-audio",
            "tools-call-embedded-resource",
            "tools-call-mixed-content",
            "tools-call-error",
            "tools-call-with-progress",
            "tools-call-sampling",
            "tools-call-elicitation",
        )
    },
    "elicitation-sep1034-defaults": {("elicitation-sep1034-general", "FAILURE"): "Unknown tool: test_"},
    "elicitation-sep1330-enums": {("elicitation-sep1330-general", "FAILURE"): "Unknown tool: test_"},
    **{
        name: {(name, NOT_SERVED[0]): NOT_SERVED[1]}
        for name in (
            "logging-set-level",
            "tools-call-with-logging",
            "completion-complete",
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "resources-subscribe",
            "resources-unsubscribe",
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
        )
    },
}
_RESULT_DIR = re.compile(r"^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


class WithKey:
    """The local gateway with an API key on every request. The suite's CLI has no way to send a header,
    so this wrapper, serving only the test's loopback port, authenticates it as the local tenant."""

    def __init__(self, gateway: Gateway, key: str) -> None:
        self.gateway = gateway
        self.key = key
        self.max_body_bytes = gateway.max_body_bytes

    def handle(
        self, method: str, raw_path: str, query: str, headers: list[tuple[str, str]], body: bytes, **kw: Any
    ) -> Response:
        keyed = [(k, v) for k, v in headers if k.lower() != "authorization"]
        keyed.append(("authorization", f"Bearer {self.key}"))
        return self.gateway.handle(method, raw_path, query, keyed, body, **kw)


def test_the_conformance_suites_server_scenarios_each_as_classified(door: Door, tmp_path: Path) -> None:
    with served(WithKey(door.stack.gateway, DEFAULT_KEY)) as base:  # type: ignore[arg-type]
        # One Node process for every scenario.
        run = suite("server", "--url", f"{base}/v1/mcp", "--suite", "all", "-o", str(tmp_path), timeout=120)

    found: dict[str, dict[tuple[str, str], str]] = {}
    for checks_file in tmp_path.rglob("checks.json"):
        matched = _RESULT_DIR.match(checks_file.parent.name)
        assert matched, checks_file
        checks = json.loads(checks_file.read_text())
        found[matched.group(1)] = {
            (c["id"], c["status"]): c.get("errorMessage") or ""
            for c in checks
            if c["status"] in ("FAILURE", "WARNING")
        }
    assert sorted(found) == sorted(SERVER_SCENARIOS), (sorted(found), run.stdout[-2000:])
    unexpected = {
        name: problems
        for name, problems in found.items()
        if set(problems) != set(SERVER_SCENARIOS[name])
        or any(why not in problems[check] for check, why in SERVER_SCENARIOS[name].items())
    }
    assert unexpected == {}


def test_a_blocking_call_on_a_run_that_asks_a_person_answers_at_once_with_the_run_to_follow(
    door: Door,
) -> None:
    waiting = _still_running(door, door.tools["approver"], {"message": "send it"}, wait=20.0)

    task = waiting["task"]
    assert task["status"] == "input_required" and task["taskId"] == waiting["run_id"]
    assert "/respond" in task["statusMessage"] and "send" in task["statusMessage"]
    status, _, cancelled = door.stack.invoke_api("POST", f"/v1/runs/{waiting['run_id']}/cancel")
    assert status == 200 and cancelled["status"] == "cancelled"
