"""Client tools: the app runs the tool itself and answers through the respond endpoint."""

import time
from typing import Any

from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.integration.support import wait_for_run

CLIENT_TOOL = {
    "type": "client",
    "name": "pick_file",
    "description": "Ask the user to pick a file",
    "input_schema": {"type": "object", "properties": {"kind": {"type": "string"}}},
}


def waiting_on_client(stack: LocalStack, calls: int = 1, **tool_fields: Any) -> dict[str, Any]:
    _, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "client", "tools": [{**CLIENT_TOOL, **tool_fields}]}
    )
    script = [
        {"tool_calls": [{"name": "pick_file", "arguments": {"kind": f"k{i}"}} for i in range(calls)]},
        {"text": "thanks"},
    ]
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go", "script": script}
    )

    def requested() -> list[dict[str, Any]]:
        _, _, listed = stack.invoke_api(
            "GET", f"/v1/sessions/{accepted['session_id']}/interactions?status=pending"
        )
        _, _, page = stack.invoke_api("GET", f"/v1/runs/{accepted['run_id']}/events")
        events = [e for e in page["events"] if e["type"] == "client_tool_requested"]
        # The request event is written once the wait holds its token: answer after it, like an app.
        assert len(listed["interactions"]) == calls and len(events) == calls, listed
        return list(listed["interactions"])

    return {
        **accepted,
        "interactions": eventually(requested, timeout=30, what=f"{calls} client tool call(s)"),
    }


def respond(
    stack: LocalStack, interaction: dict[str, Any], key: str | None, **answer: Any
) -> tuple[int, Any]:
    body = {
        "answer": {
            "tool_call_id": interaction["tool_call_id"],
            "outcome": "completed",
            "output": None,
            **answer,
        }
    }
    headers = {"Idempotency-Key": key} if key else {}
    status, _, response = stack.invoke_api(
        "POST", f"/v1/sessions/interactions/{interaction['interaction_id']}/respond", body, headers=headers
    )
    return status, response


def tool_results(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0&wait=1")
    return [e["data"] for e in page["events"] if e["type"] == "tool_result"]


def test_the_app_answers_and_the_model_reads_its_output(stack: LocalStack) -> None:
    waiting = waiting_on_client(stack)
    (interaction,) = waiting["interactions"]
    assert interaction["kind"] == "client_tool" and interaction["tool_name"] == "pick_file"
    assert interaction["arguments"] == {"kind": "k0"} and interaction["status"] == "pending"

    status, body = respond(stack, interaction, "key-1", output={"path": "/tmp/a.txt"})

    assert status == 202 and body["status"] == "answered"
    run = wait_for_run(stack, waiting["run_id"])
    assert run["status"] == "succeeded" and run["output"] == "thanks"
    assert tool_results(stack, waiting["run_id"])[0]["output"] == {"path": "/tmp/a.txt"}
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{waiting['run_id']}/events")
    assert [e["type"] for e in page["events"]].count("client_tool_requested") == 1
    assert [e["type"] for e in page["events"]].count("client_tool_answered") == 1


def test_an_error_outcome_reaches_the_model_as_an_error(stack: LocalStack) -> None:
    waiting = waiting_on_client(stack)

    respond(stack, waiting["interactions"][0], "key-err", outcome="error", output="user cancelled")

    assert wait_for_run(stack, waiting["run_id"])["status"] == "succeeded"
    (result,) = tool_results(stack, waiting["run_id"])
    assert result["error"]["code"] == "client_error" and "user cancelled" in result["error"]["message"]


def test_idempotency_key_semantics(stack: LocalStack) -> None:
    waiting = waiting_on_client(stack)
    (interaction,) = waiting["interactions"]

    assert respond(stack, interaction, None, output=1)[0] == 422  # the key is required
    assert respond(stack, interaction, "same", output=1)[0] == 202
    assert respond(stack, interaction, "same", output=1)[0] == 202  # repeat: nothing happens twice
    status, body = respond(stack, interaction, "same", output=2)
    assert status == 422 and body["error"]["code"] == "idempotency_key_reused"
    status, body = respond(stack, interaction, "other", output=1)
    assert status == 409 and body["error"]["code"] == "already_answered"

    assert wait_for_run(stack, waiting["run_id"])["status"] == "succeeded"
    assert len(tool_results(stack, waiting["run_id"])) == 1
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{waiting['run_id']}/events")
    assert [e["type"] for e in page["events"]].count("client_tool_answered") == 1


def test_a_wrong_answer_shape_or_call_id_is_422(stack: LocalStack) -> None:
    waiting = waiting_on_client(stack)
    (interaction,) = waiting["interactions"]
    path = f"/v1/sessions/interactions/{interaction['interaction_id']}/respond"
    headers = {"Idempotency-Key": "shape"}

    assert stack.invoke_api("POST", path, {"answer": {"approved": True}}, headers=headers)[0] == 422
    wrong_call = {"answer": {"tool_call_id": "nope", "outcome": "completed", "output": 1}}
    assert stack.invoke_api("POST", path, wrong_call, headers=headers)[0] == 422
    assert stack.invoke_api("POST", path, {"answer": {}}, headers=headers)[0] == 422
    assert (
        stack.invoke_api(
            "POST",
            "/v1/sessions/interactions/int_nope/respond",
            {"answer": {"approved": True}},
            headers=headers,
        )[0]
        == 404
    )
    respond(stack, interaction, "shape-ok", output=None)
    assert wait_for_run(stack, waiting["run_id"])["status"] == "succeeded"


def test_the_run_continues_once_every_pending_interaction_is_answered(stack: LocalStack) -> None:
    waiting = waiting_on_client(stack, calls=2, read_only=True)  # parallel-safe: both wait at once
    first, second = sorted(waiting["interactions"], key=lambda i: i["tool_call_id"])
    respond(stack, first, "multi-1", output="one")

    time.sleep(1.0)
    assert stack.invoke_api("GET", f"/v1/runs/{waiting['run_id']}")[2]["status"] == "waiting"
    respond(stack, second, "multi-2", output="two")

    run = wait_for_run(stack, waiting["run_id"])
    assert run["status"] == "succeeded"
    assert sorted(r["output"] for r in tool_results(stack, waiting["run_id"])) == ["one", "two"]
