"""The A2A door's pure translation, held against a2a-sdk's own protobuf types parsed strictly (an
unknown or misspelt field fails here, where the clients' lenient parsers would drop it silently)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from a2a.types.a2a_pb2 import AgentCard, StreamResponse, Task
from google.protobuf import json_format

from stepwise.agents.models import Agent
from stepwise.interactions.models import Interaction
from stepwise.protocols import a2a
from stepwise.runs.models import Run, RunError

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def run(**fields: Any) -> Run:
    base: dict[str, Any] = {
        "run_id": "run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "agent_id": "agt_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "session_id": "ses_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "status": "running",
        "input": "hello",
        "created_at": NOW,
        "metadata": {"a2a": {"message_id": "m-1"}},
    }
    return Run(**(base | fields))


def wait(kind: str = "approval") -> Interaction:
    return Interaction(
        interaction_id="int_1",
        run_id="run_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        session_id="ses_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        agent_id="agt_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        kind=kind,
        status="pending",
        step=1,
        tool_call_id="call_1",
        tool_call_index=0,
        tool_name="send",
        arguments={"q": "\u202eevil"},
        digest="d",
        timeout_seconds=300,
        created_at=NOW,
        deadline=NOW,
    )


def strict(message: Any, data: dict[str, Any]) -> Any:
    return json_format.ParseDict(data, message)  # ignore_unknown_fields=False


@pytest.mark.parametrize(
    ("status", "pending", "state"),
    [
        ("queued", False, "TASK_STATE_SUBMITTED"),
        ("running", False, "TASK_STATE_WORKING"),
        ("waiting", False, "TASK_STATE_WORKING"),  # waiting on a child run that works
        ("waiting", True, "TASK_STATE_INPUT_REQUIRED"),
        ("succeeded", False, "TASK_STATE_COMPLETED"),
        ("failed", False, "TASK_STATE_FAILED"),
        ("timed_out", False, "TASK_STATE_FAILED"),
        ("cancelled", False, "TASK_STATE_CANCELED"),
    ],
)
def test_run_states_map_onto_task_states(status: str, pending: bool, state: str) -> None:
    found = a2a.task(run(status=status), [wait()] if pending else [], 7)
    parsed = strict(Task(), found)
    assert found["status"]["state"] == state
    assert parsed.id == "run_01ARZ3NDEKTSV4RRFFQ69G5FAV" and parsed.context_id.startswith("ses_")


def test_a_completed_task_has_one_artifact_and_its_history() -> None:
    found = strict(Task(), a2a.task(run(status="succeeded", output="the answer", finished_at=NOW), []))
    assert [p.text for a in found.artifacts for p in a.parts] == ["the answer"]
    assert [m.message_id for m in found.history] == ["m-1", f"{found.id}-output"]


def test_input_required_names_the_tool_the_arguments_and_the_interaction() -> None:
    found = strict(Task(), a2a.task(run(status="waiting"), [wait()]))
    text = found.status.message.parts[0].text
    assert "send" in text and "int_1" in text and "\\u202e" in text  # hidden characters shown escaped
    described = json_format.MessageToDict(found.status.message.parts[1].data)["waitingFor"][0]
    assert described["interactionId"] == "int_1" and described["arguments"] == {"q": "\u202eevil"}


def test_a_failed_task_says_why() -> None:
    error = RunError(code="model_error", message="the model failed")
    found = strict(Task(), a2a.task(run(status="failed", error=error), []))
    assert found.status.message.parts[0].text == "the model failed"


def test_the_card_is_a_valid_agent_card() -> None:
    agent = Agent(
        agent_id="agt_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        name="teller",
        system_prompt="Tells things.\nMore.",
        created_at=NOW,
        updated_at=NOW,
    )
    card = strict(AgentCard(), a2a.card(agent, "https://api.example.com"))
    assert card.description == "Tells things."
    assert card.supported_interfaces[0].url == "https://api.example.com/a2a/agt_01ARZ3NDEKTSV4RRFFQ69G5FAV"
    assert card.capabilities.streaming and card.capabilities.push_notifications


def test_stream_events_are_stream_responses() -> None:
    body = a2a.sse("r1", [(3, {"task": a2a.task(run(), [])})])
    assert "id: 3\n" in body
    data = next(line for line in body.splitlines() if line.startswith("data: "))
    strict(StreamResponse(), json.loads(data[6:])["result"])


def test_parts_become_the_message_and_attachments() -> None:
    message = a2a.MessageIn.model_validate(
        {
            "messageId": "m",
            "parts": [
                {"text": "look"},
                {"data": {"a": 1}},
                {"raw": "aGk=", "filename": "hi.txt", "mediaType": "text/plain"},
            ],
        }
    )
    text, files = a2a.run_input(message)
    assert text == 'look\n\n{"a": 1}'
    assert files == [{"name": "hi.txt", "content_type": "text/plain", "data": "aGk="}]


def test_errors_carry_the_a2a_code_and_a_stable_code() -> None:
    body = a2a.task_not_found("run_x").body(5)
    assert body["error"]["code"] == -32001 and body["id"] == 5
    assert body["error"]["data"][0]["metadata"] == {"code": "task_not_found"}
