"""The Responses door's pure translation: a run's events in, the Responses stream and output items out,
held to the openai client's own types and its stream accumulator."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from stepwise.core.errors import Malformed, NotFound
from stepwise.interactions.models import Interaction
from stepwise.llm.models import Usage
from stepwise.protocols import responses as door
from stepwise.protocols import responses_output as output
from stepwise.runs.models import Run, RunError, RunEvent

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUN_ID = "run_01J00000000000000000000000"


def run(status: str = "succeeded", **fields: Any) -> Run:
    return Run(
        run_id=RUN_ID,
        agent_id="agt_01J00000000000000000000000",
        session_id="ses_01J00000000000000000000000",
        status=status,
        input="hi",
        created_at=NOW,
        finished_at=NOW if status in ("succeeded", "failed", "cancelled") else None,
        usage=Usage(input_tokens=10, output_tokens=5, cached_tokens=4),
        **fields,
    )


def log(*events: tuple[str, dict[str, Any]]) -> list[RunEvent]:
    return [RunEvent(seq=i + 1, type=t, data=d, at=NOW) for i, (t, d) in enumerate(events)]


TOOLS_THEN_ANSWER = log(
    ("run_started", {}),
    ("step_started", {"step": 1}),
    ("chunk", {"step": 1, "offset": 0, "text": "Let me look."}),
    ("tool_call", {"tool_call_id": "c1", "tool_name": "lookup", "arguments": {"q": "x"}}),
    ("tool_result", {"tool_call_id": "c1", "tool_name": "lookup", "output": "42"}),
    ("step_completed", {"step": 1, "action": "tools"}),
    ("step_started", {"step": 2}),
    ("chunk", {"step": 2, "offset": 0, "text": "The answer "}),
    ("chunk", {"step": 2, "offset": 0, "text": "The answer "}),  # a retried step sends its text again
    ("chunk", {"step": 2, "offset": 11, "text": "is 42."}),
    ("step_completed", {"step": 2, "action": "final"}),
    ("run_completed", {"output": "The answer is 42."}),
)


def translated(events: list[RunEvent], ended: Run) -> output.Translator:
    translator = output.Translator(RUN_ID)
    translator.begin(run("running"))
    for event in events:
        translator.feed(event)
    translator.finish(ended)
    return translator


def test_a_run_s_log_is_a_stream_the_client_s_accumulator_completes() -> None:
    translator = translated(TOOLS_THEN_ANSWER, run(output="The answer is 42."))
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)

    shown = [
        shown for event in translator.events for shown in state.handle_event(EVENTS.validate_python(event))
    ]

    # What the accumulator built from the deltas alone is the answer, once (no text shown twice).
    deltas = [e for e in shown if e.type == "response.output_text.delta"]
    assert [d.snapshot for d in deltas] == ["Let me look.", "The answer ", "The answer is 42."]
    added = [e.item for e in shown if e.type == "response.output_item.added"]
    assert [getattr(item, "content", []) for item in added] == [[], [], []]
    final = state._completed_response
    assert final is not None and final.output_text == "Let me look.The answer is 42."
    assert [(item.type, getattr(item, "phase", None)) for item in final.output] == [
        ("message", "commentary"),
        ("function_call", None),
        ("message", "final_answer"),
    ]
    numbers = [e["sequence_number"] for e in translator.events]
    assert numbers[:2] == [0, 1] and numbers == sorted(set(numbers))
    assert all(n // output.BLOCK in range(13) for n in numbers)  # numbered by the run event they come from


def test_usage_is_in_responses_shape() -> None:
    response = Response.model_validate(output.response_object(run(), [], "completed"))

    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (
        10,
        5,
        15,
    )
    assert response.usage.input_tokens_details.cached_tokens == 4
    assert response.usage.output_tokens_details.reasoning_tokens == 0


def test_an_answer_that_was_not_streamed_is_still_the_output() -> None:
    translator = translated(log(("run_completed", {"output": "whole"})), run(output="whole"))

    assert translator.events[-1]["type"] == "response.completed"
    assert Response.model_validate(translator.events[-1]["response"]).output_text == "whole"


@pytest.mark.parametrize(
    ("status", "error", "event", "code"),
    [
        ("failed", RunError(code="rate_limited", message="slow"), "response.failed", "rate_limit_exceeded"),
        ("timed_out", RunError(code="timed_out", message="late"), "response.failed", "server_error"),
        ("cancelled", RunError(code="cancelled", message="stop"), "response.failed", None),
    ],
)
def test_a_run_that_did_not_succeed_ends_the_stream_failed(
    status: str, error: RunError, event: str, code: str | None
) -> None:
    translator = translated(log(("run_failed", {})), run(status, error=error))
    response = Response.model_validate(translator.events[-1]["response"])

    assert translator.events[-1]["type"] == event
    assert response.status == ("cancelled" if status == "cancelled" else "failed")
    assert (response.error.code if response.error else None) == code


def test_a_wait_and_a_cut_come_after_the_last_event_and_before_the_next() -> None:
    waiting = output.Translator(RUN_ID)
    for event in TOOLS_THEN_ANSWER[:4]:
        waiting.feed(event)
    interaction = Interaction(
        interaction_id="int_01J00000000000000000000000_1_0",
        run_id=RUN_ID,
        session_id="ses_01J00000000000000000000000",
        agent_id="agt_01J00000000000000000000000",
        kind="approval",
        status="pending",
        step=1,
        tool_call_id="c1",
        tool_call_index=0,
        tool_name="lookup",
        arguments={"q": "x"},
        digest="d",
        timeout_seconds=60,
        created_at=NOW,
        deadline=NOW,
    )
    waiting.wait(run("waiting"), [interaction])
    cut = output.Translator(RUN_ID)
    for event in TOOLS_THEN_ANSWER[:4]:
        cut.feed(event)
    cut.cut(run("running"))

    incomplete = Response.model_validate(waiting.events[-1]["response"])
    assert incomplete.status == "incomplete" and incomplete.incomplete_details is not None
    assert (
        "POST /v1/sessions/interactions/int_01J00000000000000000000000_1_0/respond" in incomplete.output_text
    )
    assert waiting.events[-1]["sequence_number"] == cut.events[-1]["sequence_number"] == 5 * output.BLOCK - 1
    assert cut.events[-1]["type"] == "response.in_progress"


def test_input_is_a_string_or_the_last_user_message_s_text() -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "old"},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
        },
        {"role": "assistant", "content": "x"},
    ]

    assert door.text_of("plain") == "plain"
    assert door.text_of(items) == "a\nb"
    with pytest.raises(Malformed, match="no text"):
        door.text_of("   ")


@pytest.mark.parametrize(
    "model", ["gpt-4o", "agent:", "agent:agt_bad", "agent:run_01J00000000000000000000000"]
)
def test_a_model_that_names_no_agent_is_not_found(model: str) -> None:
    with pytest.raises(NotFound) as found:
        door.agent_of(model)
    assert found.value.code == "agent_not_found"


def test_errors_are_in_openai_s_shape_with_the_field_at_fault() -> None:
    validation = {
        "errors": [{"loc": ["body", "metadata", "n"], "msg": "not a string", "type": "string_type"}]
    }

    assert door.error_body(422, "validation_error", "bad", validation) == {
        "error": {
            "message": "bad",
            "type": "invalid_request_error",
            "param": "metadata.n",
            "code": "validation_error",
        }
    }
    assert door.error_body(500, "internal_error", "oops")["error"]["type"] == "server_error"


def test_a_blocking_create_waits_only_what_its_start_left_of_the_25_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """API Gateway ends the request at 30 s whatever the wait: a slow start (a cold start, a throttled
    StartExecution) must come out of the wait, or the answer is a 504 the client retries into a second
    run (the openai client sends no Idempotency-Key of its own)."""
    from stepwise.runs import start

    clock = [100.0]
    waited: list[float] = []

    def slow_start(*args: Any, **kwargs: Any) -> dict[str, Any]:
        clock[0] += 6.0
        return {"run_id": RUN_ID, "status": "queued"}

    def settled(tenant_id: str, run_id: str, wait: float) -> Any:
        waited.append(wait)
        raise LookupError("enough: the wait is what this test asks about")

    monkeypatch.setattr(door.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(start, "start_run_once", slow_start)
    monkeypatch.setattr(door, "_settled", settled)

    with pytest.raises(LookupError):
        door.create(
            "t1", door.ResponseCreate(model="agent:agt_01J00000000000000000000000", input="hi"), key=None
        )

    assert waited == [door.SETTLE_WAIT - 6.0]
