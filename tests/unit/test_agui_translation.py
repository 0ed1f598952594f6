"""The AG-UI door's pure translation (stepwise.protocols.agui and agui_stream): Stepwise events into
AG-UI events that ag-ui-protocol's own models accept, thread ids into sessions, resume entries into
answers."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from ag_ui.core import Event
from ag_ui.encoder import EventEncoder
from pydantic import TypeAdapter

from stepwise.core import ids
from stepwise.core.errors import Unprocessable
from stepwise.core.schema import utcnow
from stepwise.interactions.models import Interaction
from stepwise.llm.models import Usage
from stepwise.protocols import agui, agui_stream
from stepwise.runs.models import RunEvent

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


def _stream() -> agui_stream.Stream:
    frame = agui_stream.Frame("run_R", 0)
    return agui_stream.Stream("t1", "thread", "agui-run", "run_R", "ses_S", frozenset(), Usage(), [frame])


def _event(seq: int, etype: str, **data: Any) -> RunEvent:
    return RunEvent.model_validate({"seq": seq, "type": etype, "data": data, "at": utcnow()})


def _interaction(kind: str) -> Interaction:
    now = utcnow()
    return Interaction(
        interaction_id="int_X_1_0",
        run_id="run_R",
        session_id="ses_S",
        agent_id="agt_A",
        kind=kind,
        status="pending",
        step=1,
        tool_call_id="call_1",
        tool_call_index=0,
        tool_name="lookup",
        arguments={"q": "x"},
        digest="d",
        timeout_seconds=300,
        created_at=now,
        deadline=now + timedelta(minutes=5),
    )


def test_a_steps_events_become_ag_ui_events_the_protocols_models_accept() -> None:
    stream = _stream()
    frame = stream.frames[0]
    log = [
        _event(1, "run_started"),
        _event(2, "step_started", step=1),
        _event(3, "chunk", step=1, offset=0, text="Hel"),
        _event(4, "chunk", step=1, offset=3, text="lo"),
        _event(5, "step_completed", step=1),
        _event(6, "tool_call", tool_call_id="c1", tool_name="lookup", arguments={"q": "x"}),
        _event(7, "tool_result", tool_call_id="c1", tool_name="lookup", error={"code": "e", "message": "m"}),
        _event(8, "approval_requested", interaction_id="int_Y_1_0", run_id="run_child"),  # mirrored
        _event(9, "hook_blocked", tool_name="lookup"),
    ]

    said = [stream.translate(frame, e) for e in log]

    parsed = [EVENTS.validate_python(e) for e in stream.out]
    assert [e.type.value for e in parsed] == [
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "CUSTOM",
    ]
    assert said[7] is None  # a descendant's wait mirrored here is its own log's to show
    assert parsed[-1].name == "stepwise.hook_blocked"
    assert all("subagentRunId" not in e for e in stream.out)  # the root's events carry no attribution


def test_sse_frames_read_as_the_official_encoder_writes_them() -> None:
    stream = _stream()
    stream.translate(stream.frames[0], _event(1, "step_started", step=2))

    ours = agui_stream.sse(stream.out)
    theirs = EventEncoder().encode(EVENTS.validate_python(stream.out[0]))

    assert ours.endswith("\n\n") and ours.startswith("data: ")
    assert EVENTS.validate_json(ours.removeprefix("data: ")) == EVENTS.validate_json(
        theirs.removeprefix("data: ")
    )


def test_a_thread_is_its_session_or_a_session_of_its_own_per_tenant_and_agent() -> None:
    session = ids.new_id("ses")

    mapped = agui.thread_session("t1", "agt_A", "3f1c-uuid")

    assert agui.thread_session("t1", "agt_A", session) == session
    assert re.fullmatch(ids.SESSION_ID, mapped)
    assert mapped == agui.thread_session("t1", "agt_A", "3f1c-uuid")  # stable across retries
    assert mapped != agui.thread_session("t2", "agt_A", "3f1c-uuid")  # never another tenant's
    assert mapped != agui.thread_session("t1", "agt_B", "3f1c-uuid")


def test_resume_entries_become_the_respond_paths_answers() -> None:
    approval, tool = _interaction("approval"), _interaction("client_tool")

    assert agui._answer(approval, "resolved", None) == {"approved": True}
    assert agui._answer(approval, "resolved", {"approved": False, "reason": "no"}) == {
        "approved": False,
        "reason": "no",
    }
    assert agui._answer(approval, "resolved", {"decision": "deny"}) == {"approved": False}
    assert agui._answer(approval, "cancelled", {"approved": True})["approved"] is False
    assert agui._answer(tool, "resolved", {"colour": "blue"}) == {
        "tool_call_id": "call_1",
        "outcome": "completed",
        "output": {"colour": "blue"},
    }
    assert agui._answer(tool, "cancelled", None)["outcome"] == "error"


@pytest.mark.parametrize("payload", [{"approved": "false"}, {"approved": 0}, {"decision": "no"}, "deny", 0])
def test_an_approval_payload_that_is_no_decision_is_refused_not_read_as_consent(payload: Any) -> None:
    with pytest.raises(Unprocessable) as refused:
        agui._answer(_interaction("approval"), "resolved", payload)

    assert refused.value.code == "invalid_resume_payload"


def test_an_interrupt_names_its_interaction_tool_and_arguments() -> None:
    interrupt = agui_stream._interrupt(_stream(), _interaction("approval"))

    checked = EVENTS.validate_python(
        {
            "type": "RUN_FINISHED",
            "threadId": "thread",
            "runId": "agui-run",
            "outcome": {"type": "interrupt", "interrupts": [interrupt]},
        }
    )
    [parsed] = checked.outcome.interrupts
    assert (parsed.id, parsed.reason, parsed.tool_call_id) == ("int_X_1_0", "approval", "call_1")
    assert parsed.metadata["stepwise"] == {
        "kind": "approval",
        "tool": "lookup",
        "arguments": {"q": "x"},
        "runId": "run_R",
    }
