"""The SDK (stepwise_sdk) against the local stack over HTTP, through a proxy that can fail requests and
cut connections: runs created, followed and waited for (sync and async), event iteration that resumes
by seq across a forced disconnect, typed errors with the contract's codes, retries on 429/5xx for
idempotent calls only, and the Idempotency-Key that makes a lost answer safe to send again."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from stepwise_sdk import (
    AsyncStepwise,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    RateLimitError,
    RetryPolicy,
    ServerError,
    Stepwise,
    UnprocessableError,
)
from stepwise_sdk.models import RunEvent
from tests.e2e.support import KEY, OTHER_KEY
from tests.eventually import eventually
from tests.fakes.proxy import Proxy

FAST = RetryPolicy(initial_delay=0.05, max_delay=0.2)
PICK = {
    "type": "client",
    "name": "pick",
    "description": "Ask the app which one",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}
SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "pick", "arguments": {"q": "which?"}}]},
    {"text": "picked"},
]


@pytest.fixture
def proxy(base_url: str) -> Iterator[Proxy]:
    fake = Proxy(base_url)
    yield fake
    fake.close()


@pytest.fixture
def client(proxy: Proxy) -> Iterator[Stepwise]:
    with Stepwise(base_url=proxy.url, api_key=KEY, retries=FAST) as sdk:
        yield sdk


@pytest.fixture
def direct(base_url: str) -> Iterator[Stepwise]:
    """A client that bypasses the proxy: the app's other process, or the test's own view."""
    with Stepwise(base_url=base_url, api_key=KEY) as sdk:
        yield sdk


def logged(direct: Stepwise, run_id: str) -> list[tuple[int, str]]:
    """The run's whole event log, read in one go once it has ended."""
    return [(e.seq, e.type) for e in direct.runs.events(run_id)]


class CutThenAnswer:
    """In the background: once the client's long poll for what follows the client tool's request is in
    flight at the stack, cut its connection, then answer the tool (giving the poll something to return)."""

    def __init__(self, direct: Stepwise, proxy: Proxy, run_id: str, session_id: str) -> None:
        self.direct, self.proxy, self.run_id, self.session_id = direct, proxy, run_id, session_id
        self.cuts: list[int] = []
        self._thread: threading.Thread | None = None

    def start(self, asked: RunEvent) -> None:
        self._thread = threading.Thread(target=self._act, args=(asked.seq,), daemon=True)
        self._thread.start()

    def join(self) -> None:
        assert self._thread is not None, "the client tool was never requested"
        self._thread.join(30)

    def _act(self, seq: int) -> None:
        path = f"/v1/runs/{self.run_id}/events"

        def polling() -> bool:
            return any(s.query["after"] == str(seq) for s in self.proxy.in_flight("GET", path))

        eventually(polling, timeout=30, interval=0.1, what=f"a long poll after {seq}")
        self.cuts.append(self.proxy.cut())
        [waiting] = self.direct.interactions.list(self.session_id, status="pending").interactions
        self.direct.interactions.respond(
            waiting.interaction_id,
            {"tool_call_id": waiting.tool_call_id, "outcome": "completed", "output": {"choice": "b"}},
        )


def resent_after_the_cut(proxy: Proxy, run_id: str) -> list[str]:
    """The `after` values polled more than once: what the client sent again after losing a poll."""
    afters = [s.query["after"] for s in proxy.sent("GET", f"/v1/runs/{run_id}/events")]
    return sorted({a for a in afters if afters.count(a) > 1})


def helper_seq(seen: list[RunEvent]) -> int:
    return next(e.seq for e in seen if e.type == "client_tool_requested")


def test_a_run_is_started_answered_and_waited_for(client: Stepwise) -> None:
    agent = client.agents.create(name="sdk-e2e", tools=[PICK])
    run = client.runs.create(agent.agent_id, message="choose", script=SCRIPT)
    events = client.runs.events(run.run_id)
    asked = next(e for e in events if e.type == "client_tool_requested")

    answered = client.interactions.respond(
        asked.data["interaction_id"],
        {"tool_call_id": asked.data["tool_call_id"], "outcome": "completed", "output": {"choice": "b"}},
    )
    rest = [e.type for e in events]
    done = client.runs.wait(run.run_id, timeout=60)

    assert agent.tools[0].name == "pick" and run.status == "queued"
    assert (answered.status, answered.kind, answered.tool_name) == ("answered", "client_tool", "pick")
    assert rest[0] == "client_tool_answered" and rest[-1] == "run_completed"
    assert (done.status, done.output, done.steps) == ("succeeded", "picked", 2)
    assert events.after == max(seq for seq, _ in logged(client, run.run_id))


def test_event_iteration_resumes_by_seq_across_a_forced_disconnect(
    client: Stepwise, direct: Stepwise, proxy: Proxy
) -> None:
    agent = client.agents.create(name="sdk-e2e-cut", tools=[PICK])
    run = client.runs.create(agent.agent_id, message="choose", script=SCRIPT)
    seen: list[RunEvent] = []
    helper = CutThenAnswer(direct, proxy, run.run_id, run.session_id)

    for event in client.runs.events(run.run_id):
        seen.append(event)
        if event.type == "client_tool_requested":
            helper.start(event)
    helper.join()

    assert helper.cuts == [1]
    assert resent_after_the_cut(proxy, run.run_id) == [str(helper_seq(seen))]
    assert [(e.seq, e.type) for e in seen] == logged(direct, run.run_id)  # each once, none lost
    assert seen[-1].type == "run_completed"


def test_async_iteration_resumes_across_a_forced_disconnect_and_waits(proxy: Proxy, direct: Stepwise) -> None:
    async def scenario() -> tuple[list[RunEvent], list[str], str, str]:
        async with AsyncStepwise(base_url=proxy.url, api_key=KEY, retries=FAST) as client:
            agent = await client.agents.create(name="sdk-e2e-async", tools=[PICK])
            run = await client.runs.create(agent.agent_id, message="choose", script=SCRIPT)
            helper = CutThenAnswer(direct, proxy, run.run_id, run.session_id)
            seen = []
            async for event in client.runs.events(run.run_id):
                seen.append(event)
                if event.type == "client_tool_requested":
                    helper.start(event)
            await asyncio.to_thread(helper.join)
            resent = resent_after_the_cut(proxy, run.run_id)  # before wait reads the log again
            done = await client.runs.wait(run.run_id, timeout=30)
            return seen, resent, run.run_id, done.status

    seen, resent, run_id, status = asyncio.run(scenario())

    assert resent == [str(helper_seq(seen))]
    assert [(e.seq, e.type) for e in seen] == logged(direct, run_id)
    assert status == "succeeded"


def test_errors_are_typed_and_carry_the_contract_s_code(client: Stepwise, base_url: str) -> None:
    agent = client.agents.create(name="sdk-e2e-errors")
    run = client.runs.create(agent.agent_id, message="hi")
    client.runs.wait(run.run_id, timeout=60)

    with pytest.raises(NotFoundError) as missing:
        client.agents.get("agt_missing")
    with Stepwise(base_url=base_url, api_key=OTHER_KEY) as other, pytest.raises(NotFoundError) as foreign:
        other.runs.get(run.run_id)  # another tenant's run is a 404 like one that does not exist
    with pytest.raises(UnprocessableError) as invalid:
        client.agents.create(name="")
    with pytest.raises(ConflictError) as unsafe:
        client.runs.replay(run.run_id)
    with (
        Stepwise(base_url=base_url, api_key="sk-wrong") as stranger,
        pytest.raises(AuthenticationError) as bad,
    ):
        stranger.agents.list()

    assert (missing.value.code, missing.value.status) == ("agent_not_found", 404)
    assert foreign.value.code == "run_not_found"
    assert invalid.value.code == "validation_error" and invalid.value.details
    assert unsafe.value.code == "run_succeeded"
    assert bad.value.status == 401
    assert client.runs.replay(run.run_id, force=True).replay_of == run.run_id


def test_idempotent_calls_are_retried_after_429_and_5xx_and_others_are_not(
    client: Stepwise, proxy: Proxy
) -> None:
    agent = client.agents.create(name="sdk-e2e-retries")
    path = f"/v1/agents/{agent.agent_id}"
    proxy.fail("GET", path, 503)
    proxy.fail("GET", path, 429, headers={"Retry-After": "0"})

    assert client.agents.get(agent.agent_id).agent_id == agent.agent_id
    assert len(proxy.sent("GET", path)) == 3

    proxy.fail("POST", "/v1/agents", 503)
    with pytest.raises(ServerError) as refused:
        client.agents.create(name="not-retried")
    assert refused.value.code == "http_503" and len(proxy.sent("POST", "/v1/agents")) == 2  # 1 + this one

    proxy.fail("GET", path, 429, times=3, headers={"Retry-After": "0"})
    with pytest.raises(RateLimitError) as limited:
        client.agents.get(agent.agent_id)
    assert limited.value.retry_after == 0 and len(proxy.sent("GET", path)) == 3 + 3


def test_a_lost_answer_to_a_run_start_or_a_respond_is_sent_again_under_the_same_key(
    client: Stepwise, direct: Stepwise, proxy: Proxy
) -> None:
    agent = client.agents.create(name="sdk-e2e-keys", tools=[PICK])
    runs_path = f"/v1/agents/{agent.agent_id}/runs"
    proxy.fail("POST", runs_path, 502, forward=True)  # the stack starts the run; its answer is lost

    run = client.runs.create(agent.agent_id, message="choose", script=SCRIPT)
    [waiting] = eventually(
        lambda: direct.interactions.list(run.session_id, status="pending").interactions,
        interval=0.1,
        what="the client tool's request",
    )
    respond_path = f"/v1/sessions/interactions/{waiting.interaction_id}/respond"
    proxy.fail("POST", respond_path, 502, forward=True)
    answer = {"tool_call_id": waiting.tool_call_id, "outcome": "completed", "output": 7}
    answered = client.interactions.respond(waiting.interaction_id, answer)
    done = client.runs.wait(run.run_id, timeout=60)

    starts, responds = proxy.sent("POST", runs_path), proxy.sent("POST", respond_path)
    assert len(starts) == 2 and len({s.headers["idempotency-key"] for s in starts}) == 1
    assert [r.run_id for r in direct.runs.list(session_id=run.session_id).runs] == [run.run_id]
    assert len(responds) == 2 and len({r.headers["idempotency-key"] for r in responds}) == 1
    assert answered.status == "answered" and done.status == "succeeded"
    assert [t for _, t in logged(direct, run.run_id)].count("client_tool_answered") == 1


def test_a_respond_under_a_used_key_with_another_answer_is_refused(
    client: Stepwise, direct: Stepwise
) -> None:
    agent = client.agents.create(name="sdk-e2e-reuse", tools=[PICK])
    run = client.runs.create(agent.agent_id, message="choose", script=SCRIPT)
    [waiting] = eventually(
        lambda: direct.interactions.list(run.session_id, status="pending").interactions,
        interval=0.1,
        what="the client tool's request",
    )
    answer = {"tool_call_id": waiting.tool_call_id, "outcome": "completed", "output": 1}

    client.interactions.respond(waiting.interaction_id, answer, idempotency_key="k-sdk")
    again = client.interactions.respond(waiting.interaction_id, answer, idempotency_key="k-sdk")
    with pytest.raises(UnprocessableError) as reused:
        client.interactions.respond(waiting.interaction_id, {**answer, "output": 2}, idempotency_key="k-sdk")
    with pytest.raises(ConflictError) as answered:
        client.interactions.respond(waiting.interaction_id, answer)  # a new key

    assert again.status == "answered"
    assert reused.value.code == "idempotency_key_reused"
    assert answered.value.code == "already_answered"


def test_the_health_route_and_a_follow_url(client: Stepwise, demo_agent_id: str) -> None:
    run = client.runs.create(demo_agent_id, message="hello")
    issued = client.runs.follow(run.run_id, after=0)

    assert client.health().status == "ok"
    assert issued.url.startswith("ws://127.0.0.1:")
    assert httpx.URL(issued.url).params.get("token")
    client.runs.wait(run.run_id, timeout=60)
