"""The SDK without a network: which failed calls are sent again and how long it waits, the typed errors
an answer becomes, requests checked before they are sent, and the event cursor's resumption rules."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import httpx
import pydantic
import pytest

from stepwise_sdk import (
    ApiConnectionError,
    ApiStatusError,
    AuthenticationError,
    ConflictError,
    InvalidResponse,
    RetryPolicy,
    ServerError,
    Stepwise,
    StepwiseError,
    WaitTimeout,
)
from stepwise_sdk._events import Cursor
from stepwise_sdk.models import EventPage

NO_WAIT = RetryPolicy(initial_delay=0.0)
Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler, retries: RetryPolicy = NO_WAIT) -> tuple[Stepwise, list[httpx.Request]]:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return handler(request)

    return Stepwise(
        "http://stepwise.test", "sk-k", retries=retries, transport=httpx.MockTransport(record)
    ), sent


def replies(*responses: httpx.Response | Exception) -> Handler:
    queue = list(responses)

    def answer(request: httpx.Request) -> httpx.Response:
        reply = queue.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    return answer


def interaction() -> dict[str, Any]:
    return {
        "interaction_id": "int_1",
        "run_id": "run_1",
        "kind": "approval",
        "status": "answered",
        "tool_call_id": "c1",
        "tool_name": "send_email",
        "arguments": {},
        "created_at": "2026-01-01T00:00:00Z",
    }


def agent() -> dict[str, Any]:
    at = "2026-01-01T00:00:00Z"
    return {"agent_id": "agt_1", "name": "a", "created_at": at, "updated_at": at}


UNAVAILABLE = httpx.Response(503, json={"message": "Service Unavailable"})


def test_backoff_doubles_with_jitter_up_to_the_cap_and_a_retry_after_wins() -> None:
    policy = RetryPolicy(initial_delay=1.0, max_delay=8.0, jitter=random.Random(7))

    delays = [policy.backoff(attempt) for attempt in range(6)]

    for attempt, delay in enumerate(delays):
        ceiling = min(8.0, 2.0**attempt)
        assert ceiling / 2 <= delay <= ceiling
    assert policy.backoff(0, server_says=3.0) == 3.0
    assert policy.backoff(0, server_says=600.0) == 8.0


def test_a_get_is_sent_again_after_a_5xx_until_the_retries_run_out() -> None:
    sdk, sent = client(replies(UNAVAILABLE, UNAVAILABLE, UNAVAILABLE))

    with pytest.raises(ServerError) as failed:
        sdk.agents.get("agt_1")

    assert len(sent) == 3  # the call and max_retries=2 more
    assert (failed.value.status, failed.value.code, failed.value.message) == (
        503,
        "http_503",
        "Service Unavailable",
    )


def test_a_post_without_an_idempotency_key_is_not_sent_again_after_a_5xx_or_a_broken_read() -> None:
    sdk, sent = client(replies(UNAVAILABLE))
    with pytest.raises(ServerError):
        sdk.agents.create(name="a")

    broken, sent_broken = client(replies(httpx.RemoteProtocolError("Server disconnected")))
    with pytest.raises(ApiConnectionError):
        broken.agents.create(name="a")

    assert len(sent) == len(sent_broken) == 1


def test_a_call_that_never_reached_the_server_is_sent_again_whatever_its_method() -> None:
    sdk, sent = client(
        replies(httpx.ConnectError("[Errno 111] Connection refused"), httpx.Response(201, json=agent()))
    )

    assert sdk.agents.create(name="a").agent_id == "agt_1"
    assert len(sent) == 2


def test_respond_sends_one_idempotency_key_on_every_attempt_and_a_new_one_per_call() -> None:
    sdk, sent = client(
        replies(UNAVAILABLE, httpx.Response(202, json=interaction()), httpx.Response(202, json=interaction()))
    )

    sdk.interactions.respond("int_1", {"approved": True})
    sdk.interactions.respond("int_1", {"approved": True})

    keys = [r.headers["idempotency-key"] for r in sent]
    assert keys[0] == keys[1] != keys[2]
    assert [r.url.path for r in sent] == ["/v1/sessions/interactions/int_1/respond"] * 3


def test_a_run_start_carries_an_idempotency_key_so_it_is_retried() -> None:
    accepted = {"run_id": "run_1", "session_id": "ses_1", "status": "queued"}
    sdk, sent = client(replies(UNAVAILABLE, httpx.Response(202, json=accepted)))

    run = sdk.runs.create("agt_1", message="hi", idempotency_key="mine")

    assert run.run_id == "run_1"
    assert [r.headers["idempotency-key"] for r in sent] == ["mine", "mine"]
    assert [r.read() for r in sent] == [b'{"message":"hi"}'] * 2  # only what was set: server defaults apply


def test_the_contract_s_error_becomes_its_typed_exception_with_code_and_details() -> None:
    body = {
        "error": {"code": "ambiguous_approval", "message": "several", "details": {"tool_call_ids": ["a"]}}
    }
    sdk, _ = client(
        replies(httpx.Response(409, json=body), httpx.Response(401, json={"message": "Unauthorized"}))
    )

    with pytest.raises(ConflictError) as conflict:
        sdk.approvals.approve("run_1")
    with pytest.raises(AuthenticationError) as gateway:
        sdk.agents.list()

    assert (conflict.value.code, conflict.value.details) == ("ambiguous_approval", {"tool_call_ids": ["a"]})
    assert isinstance(conflict.value, ApiStatusError) and isinstance(conflict.value, StepwiseError)
    assert (gateway.value.code, gateway.value.message) == ("http_401", "Unauthorized")


def test_a_misspelt_field_fails_before_any_request_and_ids_are_one_segment() -> None:
    sdk, sent = client(replies(httpx.Response(200, json=agent())))

    with pytest.raises(pydantic.ValidationError):
        sdk.agents.create(name="a", sytem_prompt="typo")
    assert sent == []

    sdk.agents.get("../runs/x")
    assert sent[0].url.raw_path == b"/v1/agents/..%2Fruns%2Fx"


def test_an_answer_that_is_not_the_spec_s_shape_is_an_invalid_response() -> None:
    sdk, _ = client(replies(httpx.Response(200, json={"agents": [{"name": "no id"}]})))

    with pytest.raises(InvalidResponse) as invalid:
        sdk.agents.list()

    assert invalid.value.code == "invalid_response" and invalid.value.details


def test_fields_a_newer_server_adds_are_kept() -> None:
    sdk, _ = client(replies(httpx.Response(200, json={**agent(), "labels": {"team": "x"}})))

    found = sdk.agents.get("agt_1")

    assert found.model_extra == {"labels": {"team": "x"}}


def test_memories_name_their_user_in_the_query_and_an_upload_body_is_checked_first() -> None:
    listed = {"memories": [], "next_token": None}
    sdk, sent = client(replies(httpx.Response(200, json=listed), httpx.Response(204)))

    sdk.memories.list("agt_1", user_id="u@x", limit=10)
    sdk.memories.forget("agt_1", user_id="u@x")
    with pytest.raises(pydantic.ValidationError):
        sdk.uploads.create(name="a.png", content_type="image/png", size=3, sha="typo")

    assert [(r.method, r.url.path, dict(r.url.params)) for r in sent] == [
        ("GET", "/v1/agents/agt_1/memories", {"user_id": "u@x", "limit": "10"}),
        ("DELETE", "/v1/agents/agt_1/memories", {"user_id": "u@x"}),
    ]


def page(*seqs: int, next_: int, done: bool, last: str = "chunk") -> EventPage:
    events = [
        {"seq": s, "type": last if s == seqs[-1] else "chunk", "data": {}, "at": "2026-01-01T00:00:00Z"}
        for s in seqs
    ]
    return EventPage.model_validate({"events": events, "next": next_, "done": done})


def test_the_cursor_skips_what_it_gave_and_ends_at_the_terminal_event_or_done() -> None:
    cursor = Cursor("run_1", after=2)

    assert [e.seq for e in cursor.take(page(1, 2, 3, 4, next_=4, done=False))] == [3, 4]
    assert cursor.next_call().params == {"after": 4, "wait": 20}
    assert [e.seq for e in cursor.take(page(5, 6, next_=6, done=False, last="run_completed"))] == [5, 6]
    assert cursor.ended

    quiet = Cursor("run_2")
    assert quiet.take(EventPage(events=[], next=9, done=True)) == []
    assert quiet.ended and quiet.after == 9


def test_waiting_past_the_deadline_is_a_wait_timeout() -> None:
    sdk, sent = client(lambda request: httpx.Response(200, json={"events": [], "next": 0, "done": False}))

    with pytest.raises(WaitTimeout):
        sdk.runs.wait("run_1", timeout=0.05)

    assert 0 < float(sent[0].url.params["wait"]) <= 0.05
