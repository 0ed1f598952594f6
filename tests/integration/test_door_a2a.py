"""The A2A door against the local stack over loopback HTTP, driven by the official clients: a2a-sdk's
Python client for everything, @a2a-js/sdk under Node once (send + get). A task is a run; these check
that what the clients send and parse is what the door answers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, TypeVar

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.errors import AgentCardResolutionError
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import json_format, struct_pb2
from standardwebhooks.webhooks import Webhook

from stepwise_local.stack import DEFAULT_KEY, LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver
from tests.integration.support import CONFORMANCE, OTHER_KEY, node, served, tool, wait_for_run

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def base(stack: LocalStack) -> Iterator[str]:
    with served(stack.gateway) as url:
        yield url


def make_agent(stack: LocalStack, *, enabled: bool = True, key: str = DEFAULT_KEY, **fields: Any) -> str:
    body = {"name": "teller", "system_prompt": "Tells things.", "script": [{"text": "all done"}], **fields}
    if enabled:
        body["a2a"] = {"enabled": True}
    status, _, agent = stack.invoke_api("POST", "/v1/agents", body, key=key)
    assert status == 201, agent
    return str(agent["agent_id"])


@pytest.fixture(scope="module")
def agent_id(stack: LocalStack) -> str:
    return make_agent(stack)


def http(key: str = DEFAULT_KEY) -> httpx.AsyncClient:
    return httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=40)


async def client_for(base: str, agent_id: str, *, streaming: bool = False, key: str = DEFAULT_KEY) -> Any:
    factory = ClientFactory(ClientConfig(httpx_client=http(key), streaming=streaming))
    return await factory.create_from_url(f"{base}/a2a/{agent_id}")


def text_message(text: str, **fields: Any) -> Message:
    return Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)], **fields)


def data_message(data: dict[str, Any], task_id: str, message_id: str | None = None) -> Message:
    value = struct_pb2.Value()
    json_format.ParseDict(data, value)
    return Message(
        message_id=message_id or str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(data=value)],
        task_id=task_id,
    )


async def send(client: Any, message: Message, *, immediately: bool = False) -> Task:
    request = SendMessageRequest(
        message=message, configuration=SendMessageConfiguration(return_immediately=immediately)
    )
    found = [r async for r in client.send_message(request)]
    assert len(found) == 1 and found[0].HasField("task"), found
    return found[0].task


async def events(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    return [e async for e in stream]


def seq_of(event: StreamResponse) -> int:
    which = event.WhichOneof("payload")
    meta = json_format.MessageToDict(getattr(event, which).metadata)
    return int(meta["stepwise"]["seq"])


def state_name(state: int) -> str:
    return TaskState.Name(state)


# --- Card ------------------------------------------------------------------------------------------


def test_the_card_is_public_and_names_the_json_rpc_interface(base: str, agent_id: str) -> None:
    async def go() -> Any:
        async with httpx.AsyncClient() as anonymous:  # the card needs no key
            return await A2ACardResolver(anonymous, f"{base}/a2a/{agent_id}").get_agent_card()

    card = run(go())
    assert card.name == "teller" and card.description == "Tells things."
    assert card.capabilities.streaming and card.capabilities.push_notifications
    assert [s.id for s in card.skills][:1] == [agent_id]
    (interface,) = card.supported_interfaces
    assert (interface.url, interface.protocol_binding) == (f"{base}/a2a/{agent_id}", "JSONRPC")
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"


def test_a_closed_door_or_an_unknown_agent_has_no_card(stack: LocalStack, base: str) -> None:
    closed = make_agent(stack, enabled=False)
    unknown = "agt_01ARZ3NDEKTSV4RRFFQ69G5FAV"
    for agent_id in (closed, unknown):
        response = httpx.get(f"{base}/a2a/{agent_id}/.well-known/agent-card.json")
        assert response.status_code == 404, response.text

        async def resolve(agent_id: str = agent_id) -> None:
            await client_for(base, agent_id)

        with pytest.raises(AgentCardResolutionError):
            run(resolve())
    # Opened later, closed again: the sparse index follows the door.
    stack.invoke_api("PATCH", f"/v1/agents/{closed}", {"a2a": {"enabled": True}})
    assert httpx.get(f"{base}/a2a/{closed}/.well-known/agent-card.json").status_code == 200
    stack.invoke_api("PATCH", f"/v1/agents/{closed}", {"a2a": None})
    assert httpx.get(f"{base}/a2a/{closed}/.well-known/agent-card.json").status_code == 404


# --- Send, get, list, cancel -----------------------------------------------------------------------


def test_a_blocking_send_answers_the_completed_task_and_a_retry_starts_nothing(
    stack: LocalStack, base: str, agent_id: str
) -> None:
    message = text_message("hello")

    async def go() -> tuple[Task, Task, Task]:
        client = await client_for(base, agent_id)
        first = await send(client, message)
        again = await send(client, message)  # the same messageId: the same task
        got = await client.get_task(GetTaskRequest(id=first.id))
        return first, again, got

    first, again, got = run(go())
    assert state_name(first.status.state) == "TASK_STATE_COMPLETED"
    (artifact,) = first.artifacts
    assert artifact.parts[0].text == "all done"
    assert again.id == first.id
    assert got.id == first.id and got.context_id == first.context_id
    assert state_name(got.status.state) == "TASK_STATE_COMPLETED"
    _, _, listing = stack.invoke_api("GET", f"/v1/runs?session_id={first.context_id}")
    assert [r["run_id"] for r in listing["runs"]] == [first.id]


def test_a_non_blocking_send_answers_at_once_and_the_context_continues(
    base: str, agent_id: str, stack: LocalStack
) -> None:
    async def go() -> tuple[Task, Task]:
        client = await client_for(base, agent_id)
        first = await send(client, text_message("one"), immediately=True)
        return first, await send(client, text_message("two", context_id=first.context_id))

    first, second = run(go())
    assert state_name(first.status.state) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert second.context_id == first.context_id and second.id != first.id
    assert state_name(second.status.state) == "TASK_STATE_COMPLETED"
    assert wait_for_run(stack, first.id)["status"] == "succeeded"


def test_list_filters_by_context_and_state_and_pages(stack: LocalStack, base: str) -> None:
    agent = make_agent(stack)

    async def go() -> tuple[list[Task], list[Task], list[Task], list[Task]]:
        client = await client_for(base, agent)
        one = await send(client, text_message("a"))
        await send(client, text_message("b", context_id=one.context_id))
        await send(client, text_message("c"))
        in_context = await client.list_tasks(ListTasksRequest(context_id=one.context_id))
        done = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
        failed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_FAILED))
        pages: list[Task] = []
        token = ""
        while True:
            page = await client.list_tasks(ListTasksRequest(page_size=2, page_token=token))
            pages += page.tasks
            token = page.next_page_token
            if not token:
                break
        return list(in_context.tasks), list(done.tasks), list(failed.tasks), pages

    in_context, done, failed, pages = run(go())
    assert len(in_context) == 2 and {t.context_id for t in in_context} == {in_context[0].context_id}
    assert len(done) == 3 and not failed
    assert len(pages) == 3 and len({t.id for t in pages}) == 3


def test_cancel_then_cancel_again_is_not_cancelable(stack: LocalStack, base: str, receiver: Receiver) -> None:
    agent = approver(stack, receiver)

    async def go() -> tuple[Task, Task]:
        client = await client_for(base, agent)
        waiting = await send(client, text_message("go"))
        cancelled = await client.cancel_task(CancelTaskRequest(id=waiting.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=waiting.id))
        return waiting, cancelled

    waiting, cancelled = run(go())
    assert state_name(waiting.status.state) == "TASK_STATE_INPUT_REQUIRED"
    assert state_name(cancelled.status.state) == "TASK_STATE_CANCELED"


def test_another_tenants_task_is_not_found_and_bad_calls_are_the_protocols_errors(
    stack: LocalStack, base: str, agent_id: str
) -> None:
    theirs = make_agent(stack, key=OTHER_KEY)

    async def go() -> None:
        mine = await client_for(base, agent_id)
        task = await send(mine, text_message("mine"))
        other = await client_for(base, theirs, key=OTHER_KEY)
        with pytest.raises(TaskNotFoundError):
            await other.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await other.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await mine.get_task(GetTaskRequest(id="run_01ARZ3NDEKTSV4RRFFQ69G5FAV"))
        streaming = await client_for(base, theirs, streaming=True, key=OTHER_KEY)
        with pytest.raises(TaskNotFoundError):  # the error arrives as the stream's SSE `error` event
            await events(streaming.subscribe(SubscribeToTaskRequest(id=task.id)))

    run(go())
    # The other tenant's agent through my key: the protocol's error, not a 500.
    call = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    auth = {"Authorization": f"Bearer {DEFAULT_KEY}"}
    answer = httpx.post(f"{base}/a2a/{theirs}", json=call, headers=auth).json()
    assert answer["error"]["code"] == -32600 and answer["error"]["data"][0]["metadata"] == {
        "code": "agent_not_found"
    }
    answer = httpx.post(
        f"{base}/a2a/{agent_id}", json={**call, "method": "tasks/frobnicate"}, headers=auth
    ).json()
    assert answer["error"]["code"] == -32601
    answer = httpx.post(f"{base}/a2a/{agent_id}", json={**call, "params": {"id": 5}}, headers=auth).json()
    assert answer["error"]["code"] == -32602
    assert httpx.post(f"{base}/a2a/{agent_id}", json=call).status_code == 401  # the API key is required
    # A push destination the SSRF guard refuses is refused before any task starts.
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    config = {"taskPushNotificationConfig": {"url": "http://169.254.169.254/latest/meta-data"}}
    send_call = {**call, "method": "SendMessage", "params": {"message": message, "configuration": config}}
    answer = httpx.post(f"{base}/a2a/{agent_id}", json=send_call, headers=auth).json()
    assert answer["error"]["data"][0]["metadata"] == {"code": "push_url_refused"}, answer


# --- Input required ----------------------------------------------------------------------------------

APPROVAL_SCRIPT = [{"tool_calls": [{"name": "send", "arguments": {"q": "hello"}}]}, {"text": "sent"}]


def approver(stack: LocalStack, receiver: Receiver) -> str:
    return make_agent(
        stack,
        script=APPROVAL_SCRIPT,
        tools=[tool("send", f"{receiver.url}/send", permission="ask")],
    )


def test_an_approval_is_answered_over_a2a(stack: LocalStack, base: str, receiver: Receiver) -> None:
    agent = approver(stack, receiver)

    async def go() -> tuple[Task, Task]:
        client = await client_for(base, agent)
        waiting = await send(client, text_message("go"))
        with pytest.raises(InvalidParamsError) as refused:
            await send(client, text_message("yes please", task_id=waiting.id))
        assert refused.value.data == {"code": "answer_expected"}
        assert '"decision"' in refused.value.message
        wait = json_format.MessageToDict(waiting.status.message.parts[1].data)["waitingFor"][0]
        done = await send(
            client, data_message({"decision": "approve", "interactionId": wait["interactionId"]}, waiting.id)
        )
        with pytest.raises(UnsupportedOperationError) as again:
            await send(client, data_message({"decision": "deny"}, waiting.id))
        assert again.value.data == {"code": "already_answered"}
        return waiting, done

    waiting, done = run(go())
    assert state_name(waiting.status.state) == "TASK_STATE_INPUT_REQUIRED"
    text = waiting.status.message.parts[0].text
    assert "send" in text and '"q": "hello"' in text
    assert state_name(done.status.state) == "TASK_STATE_COMPLETED"
    assert done.artifacts[0].parts[0].text == "sent"
    assert len(receiver.to("/send")) == 1


def test_several_waits_are_answered_each_by_its_interaction_id(
    stack: LocalStack, base: str, receiver: Receiver
) -> None:
    calls = [{"name": "send", "arguments": {"q": "a"}}, {"name": "send", "arguments": {"q": "b"}}]
    agent = make_agent(
        stack,
        script=[{"tool_calls": calls}, {"text": "both"}],
        # Read-only: the two calls are one parallel batch, whose approvals are asked together.
        tools=[tool("send", f"{receiver.url}/send", permission="ask", read_only=True)],
    )

    def waiting_for(task: Task) -> list[dict[str, Any]]:
        if state_name(task.status.state) != "TASK_STATE_INPUT_REQUIRED":
            return []
        return list(json_format.MessageToDict(task.status.message.parts[1].data)["waitingFor"])

    async def start() -> Task:
        return await send(await client_for(base, agent), text_message("go"))

    async def get(task_id: str) -> Task:
        return await (await client_for(base, agent)).get_task(GetTaskRequest(id=task_id))

    task = run(start())

    def both_wait() -> Task | None:
        # The second wait may open a moment after the first one (each is its own Await).
        found = run(get(task.id))
        return found if len(waiting_for(found)) == 2 else None

    task = eventually(both_wait, what="both approvals to wait")

    async def go() -> Task:
        client = await client_for(base, agent)
        with pytest.raises(InvalidParamsError) as ambiguous:
            await send(client, data_message({"decision": "approve"}, task.id))
        assert ambiguous.value.data == {"code": "interaction_ambiguous"}
        first, second = (w["interactionId"] for w in waiting_for(task))
        await send(
            client, data_message({"decision": "approve", "interactionId": first}, task.id), immediately=True
        )
        return await send(client, data_message({"decision": "deny", "interactionId": second}, task.id))

    done = run(go())
    assert state_name(done.status.state) == "TASK_STATE_COMPLETED"
    assert len(receiver.to("/send")) == 1  # the approved call ran, the denied one did not


def test_a_client_tool_is_answered_with_its_result(stack: LocalStack, base: str) -> None:
    picker = {
        "type": "client",
        "name": "pick_file",
        "description": "Ask the user to pick a file",
        "input_schema": {"type": "object", "properties": {"kind": {"type": "string"}}},
    }
    script = [{"tool_calls": [{"name": "pick_file", "arguments": {"kind": "pdf"}}]}, {"text": "thanks"}]
    agent = make_agent(stack, script=script, tools=[picker])

    async def go() -> tuple[Task, Task]:
        client = await client_for(base, agent)
        waiting = await send(client, text_message("go"))
        with pytest.raises(InvalidParamsError) as wrong:
            await send(client, data_message({"decision": "approve"}, waiting.id))
        assert wrong.value.data == {"code": "wrong_answer_kind"}
        return waiting, await send(client, data_message({"result": {"file": "a.pdf"}}, waiting.id))

    waiting, done = run(go())
    (wait,) = json_format.MessageToDict(waiting.status.message.parts[1].data)["waitingFor"]
    assert (wait["kind"], wait["tool"], wait["arguments"]) == ("client_tool", "pick_file", {"kind": "pdf"})
    assert state_name(done.status.state) == "TASK_STATE_COMPLETED"
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{done.id}/events")
    (result,) = [e["data"] for e in page["events"] if e["type"] == "tool_result"]
    assert "a.pdf" in json.dumps(result)


# --- Streams ------------------------------------------------------------------------------------------


def test_a_stream_dropped_and_resumed_loses_and_repeats_nothing(
    stack: LocalStack, base: str, receiver: Receiver
) -> None:
    agent = approver(stack, receiver)

    async def resume(client: Any, task_id: str, after: int) -> list[StreamResponse]:
        # What the client saw last (the SSE id, also each event's metadata.stepwise.seq) resumes it.
        context = ClientCallContext(service_parameters={"Last-Event-ID": str(after)})
        return await events(client.subscribe(SubscribeToTaskRequest(id=task_id), context=context))

    async def go() -> tuple[list[StreamResponse], list[StreamResponse], list[StreamResponse], Task]:
        client = await client_for(base, agent, streaming=True)
        request = SendMessageRequest(message=text_message("go"))
        first: list[StreamResponse] = []
        async for event in client.send_message(request):
            first.append(event)
            break  # the connection drops right after the task
        task_id = first[0].task.id
        before = await resume(client, task_id, seq_of(first[0]))  # up to the approval it waits on
        plain = await client_for(base, agent)
        await send(plain, data_message({"decision": "approve"}, task_id))
        after = await resume(client, task_id, seq_of(before[-1]))  # the rest, once
        fresh = [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id))]
        return first, before, after, fresh[0].task

    first, before, after, now = run(go())
    streamed = before + after
    seqs = [seq_of(e) for e in streamed]
    assert seqs == sorted(seqs) and seq_of(first[0]) < seqs[0], seqs
    states = [state_name(e.status_update.status.state) for e in streamed if e.HasField("status_update")]
    assert states == [
        "TASK_STATE_WORKING",  # the run started (after the first task snapshot: not seen before)
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_WORKING",  # answered
        "TASK_STATE_COMPLETED",
    ] or states == ["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"], states
    artifacts = [e.artifact_update.artifact for e in streamed if e.HasField("artifact_update")]
    assert [a.parts[0].text for a in artifacts] == ["sent"]  # the final answer: one artifact, once
    # A subscription without a position starts from the task as it stands, which already says it all.
    assert state_name(now.status.state) == "TASK_STATE_COMPLETED" and now.artifacts[0].parts[0].text == "sent"


# --- Push notifications -------------------------------------------------------------------------------


def test_push_notifications_carry_the_token_and_a_standard_webhooks_signature(
    stack: LocalStack, base: str, receiver: Receiver
) -> None:
    status, _, secret = stack.invoke_api("POST", "/v1/webhooks/secret")
    assert status == 201, secret
    agent = approver(stack, receiver)

    async def go() -> str:
        client = await client_for(base, agent)
        waiting = await send(client, text_message("go"), immediately=True)
        config = TaskPushNotificationConfig(task_id=waiting.id, url=f"{receiver.url}/push", token="tok-123")
        created = await client.create_task_push_notification_config(config)
        assert created.id and created.token == "tok-123"
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=waiting.id)
        )
        assert [c.id for c in listed.configs] == [created.id]
        eventually(
            lambda: stack.invoke_api("GET", f"/v1/runs/{waiting.id}")[2]["status"] == "waiting",
            what="the wait",
        )
        await send(client, data_message({"decision": "approve"}, waiting.id))
        return waiting.id

    task_id = run(go())

    def states() -> list[str]:
        found = [json.loads(r.body)["task"]["status"]["state"] for r in receiver.to("/push")]
        assert "TASK_STATE_COMPLETED" in found, found
        return found

    seen = eventually(states, timeout=30, what="the completed task pushed")
    assert "TASK_STATE_WORKING" in seen
    for request in receiver.to("/push"):
        assert request.headers["x-a2a-notification-token"] == "tok-123"
        payload = Webhook(secret["secret"]).verify(request.body, request.headers)
        assert payload["task"]["id"] == task_id


# --- The JS client --------------------------------------------------------------------------------------

NODE_SCRIPT = r"""
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
const [base, agentId, key] = process.argv.slice(2);
const authFetch = (url, init = {}) =>
  fetch(url, { ...init, headers: { ...(init.headers || {}), Authorization: `Bearer ${key}` } });
const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
  transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })],
}));
const client = await factory.createFromUrl(`${base}/a2a/${agentId}/.well-known/agent-card.json`, '');
const parts = [{ content: { $case: 'text', value: 'hi from node' } }];
const message = { messageId: crypto.randomUUID(), role: 'ROLE_USER', parts };
const sent = await client.sendMessage({ message });
const got = await client.getTask({ id: sent.id });
console.log(JSON.stringify({ sent, got }));
"""


def test_the_js_client_sends_and_gets(base: str, agent_id: str) -> None:
    # Beside node_modules, so that '@a2a-js/sdk/client' resolves from it.
    script = CONFORMANCE / f".a2a-door-{uuid.uuid4().hex}.mjs"
    script.write_text(NODE_SCRIPT)
    try:
        done = subprocess.run(
            [node(), str(script), base, agent_id, DEFAULT_KEY],
            cwd=CONFORMANCE,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ},
        )
    finally:
        script.unlink()
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    sent, got = found["sent"], found["got"]
    completed = TaskState.TASK_STATE_COMPLETED  # the JS client parses enums to their numbers
    assert got["id"] == sent["id"] and got["contextId"] == sent["contextId"]
    assert sent["status"]["state"] == got["status"]["state"] == completed
    assert got["artifacts"][0]["parts"][0]["content"] == {"$case": "text", "value": "all done"}
