"""The OpenAI Responses door, driven by the official `openai` client over loopback HTTP against the local
stack. Every Response and stream event the server sends is validated by the client's own types, with no
field they do not declare (the client allows extras; we hold ourselves to none)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter

from stepwise_local.stack import DEFAULT_KEY, LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver
from tests.integration.support import OTHER_KEY, served, tool

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
TOOL_SCRIPT = [{"tool_calls": [{"name": "lookup", "arguments": {"q": "tides"}}]}, {"text": "High tide at 6."}]


@pytest.fixture(scope="module")
def base_url(stack: LocalStack) -> Iterator[str]:
    with served(stack.gateway) as url:
        yield f"{url}/v1"


def _client(base_url: str, key: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=40, _strict_response_validation=True)


@pytest.fixture(scope="module")
def client(base_url: str) -> OpenAI:
    return _client(base_url, DEFAULT_KEY)


@pytest.fixture(scope="module")
def other(base_url: str) -> OpenAI:
    return _client(base_url, OTHER_KEY)


def agent(stack: LocalStack, **fields: Any) -> str:
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "responder", **fields})
    assert status == 201, created
    return str(created["agent_id"])


def declared_only(value: Any) -> None:
    """No field the client's types do not declare, anywhere in the object."""
    if isinstance(value, BaseModel):
        assert not value.model_extra, f"{type(value).__name__} has undeclared fields {value.model_extra}"
        for name in type(value).model_fields:
            declared_only(getattr(value, name))
    elif isinstance(value, list):
        for item in value:
            declared_only(item)


def strict_response(data: Any) -> Response:
    parsed = Response.model_validate(data)
    declared_only(parsed)
    return parsed


def strict_events(stream: Any) -> list[Any]:
    """The raw stream's events, each validated again from the JSON the server sent."""
    events = []
    for event in stream:
        parsed = EVENTS.validate_python(event.to_dict())
        declared_only(parsed)
        events.append(parsed)
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers)), numbers
    return events


def test_a_string_input_gets_the_agent_s_answer_with_usage_and_metadata(
    stack: LocalStack, client: OpenAI
) -> None:
    agent_id = agent(stack)

    raw = client.responses.with_raw_response.create(
        model=f"agent:{agent_id}", input="hello there", metadata={"order": "42"}
    )
    response = raw.parse()

    strict_response(raw.http_response.json())
    assert response.status == "completed" and response.model == f"agent:{agent_id}"
    assert response.output_text == "You said: hello there"
    assert response.metadata == {"order": "42"}
    usage = response.usage
    assert usage is not None and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0
    run = stack.invoke_api("GET", f"/v1/runs/{response.id}")[2]  # the response IS the run
    assert run["status"] == "succeeded" and run["metadata"] == {"order": "42"}


def test_message_items_give_the_last_user_message(stack: LocalStack, client: OpenAI) -> None:
    items: Any = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "earlier answer"},
        {"role": "user", "content": [{"type": "input_text", "text": "second"}]},
    ]

    response = client.responses.create(model=f"agent:{agent(stack)}", input=items)

    assert response.output_text == "You said: second"


def test_unusable_input_is_a_bad_request_with_a_stable_code(stack: LocalStack, client: OpenAI) -> None:
    agent_id = agent(stack)
    image: Any = [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x.test/a.png"}]}]
    not_strings: Any = {"k": "v", "n": 1}
    with pytest.raises(openai.BadRequestError) as no_user:
        client.responses.create(model=f"agent:{agent_id}", input=[{"role": "assistant", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as not_text:
        client.responses.create(model=f"agent:{agent_id}", input=image)
    with pytest.raises(openai.UnprocessableEntityError) as invalid:
        client.responses.create(model=f"agent:{agent_id}", input="hi", metadata=not_strings)

    assert no_user.value.code == "input_without_user_message" and no_user.value.param == "input"
    assert not_text.value.code == "unsupported_input_content"
    assert invalid.value.code == "validation_error" and invalid.value.param == "metadata.n"


def test_a_stream_is_every_event_the_client_parses_and_resumes_after_any_of_them(
    stack: LocalStack, client: OpenAI, receiver: Receiver
) -> None:
    agent_id = agent(stack, tools=[tool("lookup", f"{receiver.url}/lookup")], script=TOOL_SCRIPT)

    with client.responses.stream(model=f"agent:{agent_id}", input="when is high tide?") as stream:
        helper_events = list(stream)
        final = stream.get_final_response()
    replayed = strict_events(client.responses.retrieve(final.id, stream=True))
    middle = replayed[len(replayed) // 2].sequence_number
    resumed = strict_events(client.responses.retrieve(final.id, stream=True, starting_after=middle))

    kinds = [e.type for e in replayed]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.type for e in helper_events] == kinds
    # the client's accumulator, from the deltas alone, holds the answer once
    assert [e.snapshot for e in helper_events if e.type == "response.output_text.delta"][
        -1
    ] == "High tide at 6."
    calls = [
        e.item for e in replayed if e.type == "response.output_item.done" and e.item.type == "function_call"
    ]
    assert [(c.name, c.arguments, c.status) for c in calls] == [("lookup", '{"q": "tides"}', "completed")]
    assert "".join(e.delta for e in replayed if e.type == "response.output_text.delta") == "High tide at 6."
    assert final.status == "completed" and final.output_text == "High tide at 6."
    assert [item.type for item in final.output] == ["function_call", "message"]
    assert final.usage is not None and final.usage.total_tokens > 0
    strict_response(replayed[-1].response.to_dict())
    # Resuming after any event loses nothing and repeats nothing.
    assert [e.to_dict() for e in resumed] == [e.to_dict() for e in replayed if e.sequence_number > middle]
    retrieved = strict_response(client.responses.retrieve(final.id).to_dict())
    assert [(i.type, getattr(i, "id", None)) for i in retrieved.output] == [
        (i.type, getattr(i, "id", None)) for i in final.output
    ]
    assert retrieved.output_text == final.output_text


def test_previous_response_id_continues_the_session_and_instructions_last_one_run(
    stack: LocalStack, client: OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepwise.loop import model_call

    seen: list[list[dict[str, Any]]] = []
    real = model_call.complete

    def recording(**kwargs: Any) -> Any:
        seen.append(kwargs["messages"])
        return real(**kwargs)

    monkeypatch.setattr(model_call, "complete", recording)
    model = f"agent:{agent(stack, system_prompt='Be brief.')}"

    first = client.responses.create(model=model, input="my name is Ada")
    second = client.responses.create(
        model=model, input="what is my name?", previous_response_id=first.id, instructions="Answer in French."
    )
    third = client.responses.create(model=model, input="and again?", previous_response_id=second.id)

    runs = [stack.invoke_api("GET", f"/v1/runs/{r.id}")[2] for r in (first, second, third)]
    assert len({run["session_id"] for run in runs}) == 1
    assert second.instructions == "Answer in French." and third.instructions is None
    *_, second_call, third_call = seen
    assert second_call[0] == {"role": "system", "content": "Be brief.\n\nAnswer in French."}
    assert {"role": "user", "content": "my name is Ada"} in second_call  # the model sees the history
    assert third_call[0] == {"role": "system", "content": "Be brief."}


def test_a_background_response_is_queued_then_retrieved_until_completed(
    stack: LocalStack, client: OpenAI
) -> None:
    queued = client.responses.create(model=f"agent:{agent(stack)}", input="later", background=True)

    def completed() -> Response:
        found = client.responses.retrieve(queued.id)
        assert found.status == "completed", found.status
        return found

    done = eventually(completed, timeout=30, what="the background response to complete")
    assert queued.status == "queued" and done.output_text == "You said: later"


def _approver(stack: LocalStack, receiver: Receiver) -> str:
    send = tool("lookup", f"{receiver.url}/lookup", permission="ask")
    return f"agent:{agent(stack, tools=[send], script=TOOL_SCRIPT)}"


def test_a_run_waiting_on_an_approval_is_incomplete_and_names_how_to_answer(
    stack: LocalStack, client: OpenAI, receiver: Receiver
) -> None:
    waiting = client.responses.create(model=_approver(stack, receiver), input="check the tides")
    session_id = stack.invoke_api("GET", f"/v1/runs/{waiting.id}")[2]["session_id"]
    (interaction,) = stack.invoke_api("GET", f"/v1/sessions/{session_id}/interactions")[2]["interactions"]
    interaction_id = interaction["interaction_id"]

    assert waiting.status == "incomplete" and waiting.incomplete_details is not None
    assert waiting.incomplete_details.reason is None
    assert interaction_id in waiting.output_text
    assert f"POST /v1/sessions/interactions/{interaction_id}/respond" in waiting.output_text
    status, _, _ = stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{interaction_id}/respond",
        {"answer": {"approved": True}},
        headers={"Idempotency-Key": "approve-1"},
    )
    assert status == 202

    def completed() -> Response:
        found = client.responses.retrieve(waiting.id)
        assert found.status == "completed", found.status
        return found

    assert eventually(completed, timeout=30, what="the approved run to end").output_text.endswith(
        "High tide at 6."
    )


def _approve_pending(stack: LocalStack, run_id: str) -> None:
    session_id = stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]["session_id"]
    listed = stack.invoke_api("GET", f"/v1/sessions/{session_id}/interactions?status=pending")[2]
    for interaction in listed["interactions"]:
        path = f"/v1/sessions/interactions/{interaction['interaction_id']}/respond"
        answer = {"answer": {"approved": True}}
        assert stack.invoke_api("POST", path, answer, headers={"Idempotency-Key": path})[0] == 202


def test_a_stream_cut_by_its_time_limit_ends_in_progress_and_resumes_where_it_left_off(
    stack: LocalStack, client: OpenAI, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepwise.protocols import responses as door

    model = _approver(stack, receiver)
    first = client.responses.create(model=model, input="check the tides")  # its session stays busy
    monkeypatch.setattr(door, "STREAM_WAIT", 1.0)

    queued = client.responses.create(
        model=model, input="and tomorrow?", previous_response_id=first.id, stream=True
    )
    seen = strict_events(queued)
    _approve_pending(stack, first.id)  # the first run ends; the second starts, then waits on its own approval

    def resumed() -> bool:
        after = seen[-1].sequence_number
        seen.extend(
            strict_events(client.responses.retrieve(seen[0].response.id, stream=True, starting_after=after))
        )
        assert seen[-1].type == "response.incomplete", seen[-1].type
        return True

    eventually(resumed, timeout=30, what="the resumed stream to reach the second approval")
    whole = strict_events(client.responses.retrieve(seen[0].response.id, stream=True))

    assert [e.type for e in seen[:3]] == ["response.created", "response.in_progress", "response.in_progress"]
    assert seen[2].response.status == "queued"  # cut while queued behind the first run
    numbers = [e.sequence_number for e in seen]
    assert numbers == sorted(set(numbers))  # nothing repeated across the resumptions
    cut = {e.sequence_number for e in seen[2:] if e.type == "response.in_progress"}
    assert [(e.type, e.sequence_number) for e in seen if e.sequence_number not in cut] == [
        (e.type, e.sequence_number) for e in whole
    ]  # nothing lost: the pieces are the whole stream, but for the markers where each piece ended


def test_cancel_ends_the_run_and_answers_the_cancelled_response(
    stack: LocalStack, client: OpenAI, receiver: Receiver
) -> None:
    started = client.responses.create(model=_approver(stack, receiver), input="check", background=True)

    cancelled = client.responses.cancel(started.id)

    assert cancelled.status == "cancelled" and cancelled.id == started.id
    assert stack.invoke_api("GET", f"/v1/runs/{started.id}")[2]["status"] == "cancelled"
    with pytest.raises(openai.ConflictError) as again:
        client.responses.cancel(started.id)
    assert again.value.code == "run_finished"


def test_an_unknown_agent_or_model_is_not_found(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="agent:agt_01J00000000000000000000000", input="hi")
    with pytest.raises(openai.NotFoundError) as not_an_agent:
        client.responses.create(model="gpt-4o", input="hi")

    assert unknown.value.code == "agent_not_found" and not_an_agent.value.param == "model"
    assert isinstance(unknown.value.body, dict) and set(unknown.value.body) == {
        "message",
        "type",
        "param",
        "code",
    }


def test_another_tenant_s_response_is_not_found(stack: LocalStack, client: OpenAI, other: OpenAI) -> None:
    mine = client.responses.create(model=f"agent:{agent(stack)}", input="private")

    with pytest.raises(openai.NotFoundError) as retrieved:
        other.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError) as streamed:
        other.responses.retrieve(mine.id, stream=True)
    with pytest.raises(openai.NotFoundError) as cancelled:
        other.responses.cancel(mine.id)
    with pytest.raises(openai.NotFoundError) as continued:
        other.responses.create(model=mine.model, input="x", previous_response_id=mine.id)
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.retrieve("run_01J00000000000000000000000")

    # exactly as an id that does not exist
    assert {e.value.code for e in (retrieved, streamed, cancelled, unknown)} == {"response_not_found"}
    assert continued.value.code == "previous_response_not_found"
    assert stack.invoke_api("GET", f"/v1/runs/{mine.id}")[2]["status"] == "succeeded"  # untouched


def test_a_retried_create_with_the_same_idempotency_key_starts_one_run(
    stack: LocalStack, client: OpenAI
) -> None:
    agent_id = agent(stack)
    key = {"Idempotency-Key": f"retry-{uuid.uuid4()}"}

    first = client.responses.create(model=f"agent:{agent_id}", input="once", extra_headers=key)
    again = client.responses.create(model=f"agent:{agent_id}", input="once", extra_headers=key)

    assert again.id == first.id
    assert [r["run_id"] for r in stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")[2]["runs"]] == [
        first.id
    ]


def test_the_stepwise_sdk_reaches_the_same_door(stack: LocalStack, base_url: str) -> None:
    from stepwise_sdk import Stepwise
    from stepwise_sdk.errors import NotFoundError

    with Stepwise(base_url=base_url.removesuffix("/v1"), api_key=DEFAULT_KEY) as sdk:
        created = sdk.responses.create(
            model=f"agent:{agent(stack)}", input="via the sdk", metadata={"a": "b"}
        )
        again = sdk.responses.retrieve(created.id)
        with pytest.raises(NotFoundError) as missing:
            sdk.responses.retrieve("run_01J00000000000000000000000")

    assert created.status == "completed" and created.output_text == "You said: via the sdk"
    strict_response(again.model_dump(mode="json"))
    assert again.output_text == created.output_text and again.metadata == {"a": "b"}
    assert missing.value.code == "response_not_found"
