"""Every model call paid is counted on its run, cancelled or not (issue 30): an answer that arrives
after its run was cancelled counts on the run's usage, its root's tree total and the usage API."""

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.support import wait_for_run

MODEL = "openai/gpt-fake"


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    yield fake
    fake.close()


def held_answer(model: FakeOpenAI, released: threading.Event, tokens: tuple[int, int]) -> None:
    """The next model call is answered (and paid) only once `released` is set."""

    def decide(_: dict[str, Any]) -> Reply:
        released.wait(timeout=60)
        return Reply(content="an answer nobody waits for anymore").usage(*tokens)

    model.answer(decide)


def agent(stack: LocalStack, name: str, **body: Any) -> str:
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": name, "model": MODEL, **body})
    assert status == 201, created
    return str(created["agent_id"])


def start(stack: LocalStack, agent_id: str) -> str:
    status, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "go"})
    assert status == 202, accepted
    return str(accepted["run_id"])


def counted(stack: LocalStack, agent_id: str) -> dict[str, int]:
    status, _, body = stack.invoke_api("GET", "/v1/usage?group_by=agent")
    assert status == 200, body
    rows = [r for r in body["rows"] if r.get("agent_id") == agent_id]
    return {f: sum(r[f] for r in rows) for f in ("input_tokens", "output_tokens", "model_calls")}


def cancel_while_held(stack: LocalStack, model: FakeOpenAI, run_id: str, calls: int) -> dict[str, Any]:
    eventually(lambda: len(model.requests) >= calls, what="the model call to be in flight")
    status, _, cancelled = stack.invoke_api("POST", f"/v1/runs/{run_id}/cancel")
    assert status == 200 and cancelled["status"] == "cancelled", cancelled
    return dict(cancelled)


def test_an_answer_after_the_cancel_is_counted_on_the_run_and_the_usage_api(
    stack: LocalStack, model: FakeOpenAI
) -> None:
    released = threading.Event()
    held_answer(model, released, (100, 7))
    agent_id = agent(stack, "late-answer")
    run_id = start(stack, agent_id)

    cancelled = cancel_while_held(stack, model, run_id, calls=1)
    assert cancelled["usage"]["input_tokens"] == 0  # nothing answered yet: nothing counted yet
    released.set()

    def paid() -> dict[str, Any]:
        _, _, run = stack.invoke_api("GET", f"/v1/runs/{run_id}")
        assert run["usage"]["input_tokens"] == 100, run["usage"]
        return dict(run)

    run = eventually(paid, timeout=30, what="the late answer to be counted on the run")
    assert run["status"] == "cancelled"  # counted, not resumed
    assert run["usage"]["output_tokens"] == 7
    assert run["total_usage"]["input_tokens"] == 100
    assert counted(stack, agent_id) == {"input_tokens": 100, "output_tokens": 7, "model_calls": 1}


def test_a_child_answer_after_its_root_was_cancelled_counts_on_the_root_tree(
    stack: LocalStack, model: FakeOpenAI
) -> None:
    released = threading.Event()
    child = agent(stack, "late-child")
    parent = agent(
        stack,
        "late-parent",
        tools=[{"type": "agent", "name": "ask", "description": "Ask.", "agent_id": child}],
    )
    model.tool_calls([("ask", {"message": "hi"})]).usage(30, 3)  # the root's one call
    held_answer(model, released, (100, 7))  # the child's, answered after the cancel
    root_id = start(stack, parent)

    cancel_while_held(stack, model, root_id, calls=2)
    released.set()

    def tree_paid() -> dict[str, Any]:
        _, _, root = stack.invoke_api("GET", f"/v1/runs/{root_id}")
        assert root["total_usage"]["input_tokens"] == 130, root
        return dict(root)

    root = eventually(tree_paid, timeout=30, what="the child's late answer to reach its root's tree total")
    assert root["usage"]["input_tokens"] == 30 and root["total_usage"]["output_tokens"] == 10
    child_run = wait_for_run(stack, root["children"][0])
    assert child_run["status"] == "cancelled" and child_run["usage"]["input_tokens"] == 100
    assert counted(stack, child) == {"input_tokens": 100, "output_tokens": 7, "model_calls": 1}


def test_a_child_stopped_with_its_cancelled_root_counts_on_the_root_tree(
    stack: LocalStack, model: FakeOpenAI
) -> None:
    ask_user = {
        "type": "client",
        "name": "ask_user",
        "description": "Ask the person.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    child = agent(stack, "stopped-child", tools=[ask_user])
    parent = agent(
        stack,
        "stopped-parent",
        tools=[{"type": "agent", "name": "ask", "description": "Ask.", "agent_id": child}],
    )
    model.tool_calls([("ask", {"message": "hi"})]).usage(30, 3)  # the root's call
    model.tool_calls([("ask_user", {"q": "which?"})]).usage(50, 5)  # the child's: it then waits
    root_id = start(stack, parent)

    def child_waiting() -> str:
        _, _, root = stack.invoke_api("GET", f"/v1/runs/{root_id}")
        assert root["children"], root
        _, _, kid = stack.invoke_api("GET", f"/v1/runs/{root['children'][0]}")
        assert kid["status"] == "waiting", kid["status"]
        return str(kid["run_id"])

    child_id = eventually(child_waiting, what="the child to wait on its client tool")
    status, _, cancelled = stack.invoke_api("POST", f"/v1/runs/{root_id}/cancel")
    assert status == 200, cancelled

    assert wait_for_run(stack, child_id)["status"] == "cancelled"
    _, _, root = stack.invoke_api("GET", f"/v1/runs/{root_id}")
    assert root["usage"]["input_tokens"] == 30
    assert root["total_usage"]["input_tokens"] == 80 and root["total_usage"]["output_tokens"] == 8
