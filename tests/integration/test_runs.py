"""Whole runs through the API handler, the real ASL on moto's interpreter and the step handlers."""

from typing import Any

import pytest

from stepwise_local.stack import LocalStack
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import tool, wait_for_run


def create_agent(stack: LocalStack, **body: Any) -> str:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "test", **body})
    assert status == 201, agent
    return str(agent["agent_id"])


def start(stack: LocalStack, agent_id: str, **body: Any) -> dict[str, Any]:
    status, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "hi", **body})
    assert status == 202, accepted
    assert accepted["status"] == "queued"
    return accepted


def run_events(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    """Every event of a finished run, read the way a client does: long-poll until done."""
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        status, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait=5")
        assert status == 200, page
        events += page["events"]
        after = page["next"]
        if page["done"]:
            return events
        assert page["events"], "a long-poll on a finished run returned nothing and not done"


def event_types(stack: LocalStack, run_id: str) -> list[str]:
    return [e["type"] for e in run_events(stack, run_id)]


def test_a_run_without_tools_answers_and_records_everything(stack: LocalStack) -> None:
    agent_id = create_agent(stack)

    accepted = start(stack, agent_id, message="hello there")
    run = wait_for_run(stack, accepted["run_id"])

    assert run["status"] == "succeeded"
    assert run["output"] == "You said: hello there"
    assert run["steps"] == 1
    assert run["tools_executed"] == []
    assert run["usage"]["input_tokens"] > 0 and run["usage"]["output_tokens"] > 0
    assert run["finished_at"] is not None and run["error"] is None
    types = event_types(stack, run["run_id"])
    collapsed = [t for i, t in enumerate(types) if not (t == "chunk" and i and types[i - 1] == "chunk")]
    assert collapsed == [
        "run_started",
        "step_started",
        "chunk",
        "step_completed",
        "run_completed",
    ]


def test_a_custom_tool_is_called_with_the_models_arguments(stack: LocalStack, receiver: Receiver) -> None:
    receiver.replies["/lookup"] = Reply(body={"answer": 42})
    agent_id = create_agent(stack, tools=[tool("lookup", f"{receiver.url}/lookup")])
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"q": "meaning"}}]}, {"text": "It is 42."}]

    run = wait_for_run(stack, start(stack, agent_id, script=script)["run_id"])

    assert run["status"] == "succeeded", run
    assert run["output"] == "It is 42."
    assert run["tools_executed"] == ["lookup"]
    assert [r.json() for r in receiver.to("/lookup")] == [{"q": "meaning"}]
    events = run_events(stack, run["run_id"])
    results = [e["data"] for e in events if e["type"] == "tool_result"]
    assert results == [
        {"tool_call_id": results[0]["tool_call_id"], "tool_name": "lookup", "output": {"answer": 42}}
    ]
    calls = [e["data"] for e in events if e["type"] == "tool_call"]
    assert (
        calls[0]["arguments"] == {"q": "meaning"} and calls[0]["tool_call_id"] == results[0]["tool_call_id"]
    )


def test_without_a_script_the_scripted_model_calls_each_tool_once(
    stack: LocalStack, receiver: Receiver
) -> None:
    agent_id = create_agent(
        stack, tools=[tool("alpha", f"{receiver.url}/a"), tool("beta", f"{receiver.url}/b", read_only=True)]
    )

    run = wait_for_run(stack, start(stack, agent_id)["run_id"])

    assert run["status"] == "succeeded"
    assert sorted(run["tools_executed"]) == ["alpha", "beta"]
    assert len(receiver.to("/a")) == 1 and len(receiver.to("/b")) == 1
    assert run["steps"] == 2
    assert "alpha" in run["output"] and "beta" in run["output"]


def test_the_last_step_withholds_tools(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = create_agent(stack, tools=[tool("lookup", f"{receiver.url}/lookup")])
    call = {"tool_calls": [{"name": "lookup", "arguments": {"q": "again"}}]}

    run = wait_for_run(stack, start(stack, agent_id, max_steps=2, script=[call, call, call])["run_id"])

    assert run["status"] == "succeeded"
    assert run["steps"] == 2
    assert len(receiver.to("/lookup")) == 1  # step 2 had no tools to call
    assert run["output"]


def test_the_agents_max_steps_applies_when_the_run_names_none(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = create_agent(stack, max_steps=1, tools=[tool("lookup", f"{receiver.url}/lookup")])

    run = wait_for_run(stack, start(stack, agent_id)["run_id"])

    assert run["steps"] == 1
    assert receiver.to("/lookup") == []


@pytest.mark.parametrize(
    ("reply", "arguments", "code"),
    [
        (Reply(status=500, body={"boom": True}), {"q": "x"}, "http_error"),
        (Reply(), {"wrong": 1}, "invalid_arguments"),
    ],
)
def test_a_tool_error_goes_back_to_the_model(
    stack: LocalStack, receiver: Receiver, reply: Reply, arguments: dict[str, Any], code: str
) -> None:
    receiver.replies["/lookup"] = reply
    agent_id = create_agent(stack, tools=[tool("lookup", f"{receiver.url}/lookup")])
    script = [{"tool_calls": [{"name": "lookup", "arguments": arguments}]}]

    run = wait_for_run(stack, start(stack, agent_id, script=script)["run_id"])

    assert run["status"] == "succeeded"  # a tool error is a result the model reads, not a crash
    (result,) = [e["data"] for e in run_events(stack, run["run_id"]) if e["type"] == "tool_result"]
    assert result["error"]["code"] == code
    assert code in run["output"]  # the scripted model summarises what it read
    if code == "invalid_arguments":
        assert receiver.to("/lookup") == []


def test_a_tool_the_agent_does_not_have_is_an_error_result(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = create_agent(stack, tools=[tool("lookup", f"{receiver.url}/lookup")])
    script = [{"tool_calls": [{"name": "rm_rf", "arguments": {}}]}, {"text": "done"}]

    run = wait_for_run(stack, start(stack, agent_id, script=script)["run_id"])

    assert run["status"] == "succeeded"
    assert run["tools_executed"] == []
    (result,) = [e["data"] for e in run_events(stack, run["run_id"]) if e["type"] == "tool_result"]
    assert result["error"]["code"] == "unknown_tool"


def test_a_denied_tool_is_not_called(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = create_agent(stack, tools=[tool("lookup", f"{receiver.url}/lookup", permission="deny")])

    run = wait_for_run(stack, start(stack, agent_id)["run_id"])

    assert run["status"] == "succeeded"
    assert receiver.to("/lookup") == [] and run["tools_executed"] == []


def test_a_model_that_cannot_be_called_fails_the_run_with_a_code(stack: LocalStack) -> None:
    agent_id = create_agent(stack, model="no-such-provider/no-such-model")

    run = wait_for_run(stack, start(stack, agent_id)["run_id"])

    assert run["status"] == "failed"
    assert run["error"]["code"] == "model_error"
    assert "no-such-provider/no-such-model" in run["error"]["message"]
    assert event_types(stack, run["run_id"])[-1] == "run_failed"


def test_a_session_carries_history_between_runs(
    stack: LocalStack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepwise.loop import model_call

    seen: list[list[dict[str, Any]]] = []
    real_complete = model_call.complete

    def recording(**kwargs: Any) -> Any:
        seen.append(kwargs["messages"])
        return real_complete(**kwargs)

    monkeypatch.setattr(model_call, "complete", recording)
    agent_id = create_agent(
        stack, system_prompt="Be brief.", tools=[tool("lookup", f"{receiver.url}/lookup")]
    )
    script = [{"tool_calls": [{"name": "lookup", "arguments": {"q": "one"}}]}, {"text": "first answer"}]
    first = wait_for_run(stack, start(stack, agent_id, message="first question", script=script)["run_id"])

    second = wait_for_run(
        stack,
        start(
            stack,
            agent_id,
            message="second question",
            session_id=first["session_id"],
            script=[{"text": "ok"}],
        )["run_id"],
    )

    assert second["status"] == "succeeded" and second["session_id"] == first["session_id"]
    roles = [(m["role"], m.get("content")) for m in seen[-1]]
    assert roles[0] == ("system", "Be brief.")
    assert roles[1] == ("user", "first question")
    assert roles[2][0] == "assistant" and seen[-1][2]["tool_calls"][0]["function"]["name"] == "lookup"
    assert roles[3][0] == "tool"
    assert roles[4] == ("assistant", "first answer")
    assert roles[5] == ("user", "second question")
    status, _, session = stack.invoke_api("GET", f"/v1/sessions/{first['session_id']}")
    assert status == 200
    assert [r["run_id"] for r in session["runs"]] == [first["run_id"], second["run_id"]]
    assert len(session["messages"]) == 6


def test_sync_run_answers_in_the_response(stack: LocalStack) -> None:
    agent_id = create_agent(stack)

    status, _, body = stack.invoke_api("POST", f"/v1/agents/{agent_id}/run", {"message": "ping"})

    assert status == 200, body
    assert body["output"] == "You said: ping"
    _, _, run = stack.invoke_api("GET", f"/v1/runs/{body['run_id']}")
    assert run["status"] == "succeeded" and run["steps"] == 1


def test_sync_run_with_a_failing_model_reports_the_error(stack: LocalStack) -> None:
    agent_id = create_agent(stack, model="no-such-provider/x")

    status, _, body = stack.invoke_api("POST", f"/v1/agents/{agent_id}/run", {"message": "ping"})

    assert status == 502
    assert body["error"]["code"] == "model_error"
    _, _, run = stack.invoke_api("GET", f"/v1/runs/{body['error']['details']['run_id']}")
    assert run["status"] == "failed"


def test_a_deleted_agent_fails_its_queued_run(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    from stepwise.runs import queue as start_module

    agent_id = create_agent(stack)
    real = start_module.aws.client

    def delete_then_start(service: str) -> Any:
        if service == "stepfunctions":  # the agent disappears between the record and the execution
            stack.invoke_api("DELETE", f"/v1/agents/{agent_id}")
        return real(service)

    monkeypatch.setattr(start_module.aws, "client", delete_then_start)
    run = wait_for_run(stack, start(stack, agent_id)["run_id"])

    assert run["status"] == "failed"
    assert run["error"]["code"] == "agent_not_found"


def test_a_start_whose_in_progress_record_put_lost_its_answer_still_starts(stack: LocalStack) -> None:
    """Issue 30's soak: botocore retried the idempotency record's put after a lost answer, the retry
    found the record it had written itself, and the start answered 409 request_in_progress."""
    from stepwise.core import config
    from tests.integration.support import answer_lost_once

    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "lost-answer"})
    body = {"message": "go", "script": [{"text": "ok"}]}
    headers = {"Idempotency-Key": "lost-answer-1"}
    path = f"/v1/agents/{agent['agent_id']}/runs"
    with answer_lost_once("PutItem", config.tables().idempotency) as lost:
        status, _, accepted = stack.invoke_api("POST", path, body, headers=headers)

    assert lost, "the fault was not injected"
    assert status == 202, accepted
    again = stack.invoke_api("POST", path, body, headers=headers)
    assert (again[0], again[2]["run_id"]) == (202, accepted["run_id"])
    assert wait_for_run(stack, accepted["run_id"])["status"] == "succeeded"
