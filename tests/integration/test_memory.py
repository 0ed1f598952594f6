"""Memory per end user, through the local stack: what one user's runs save, another user's never see
(not through memory_search, not through auto_recall, not through the API); forgetting a user removes
everything of theirs and nothing else; another tenant's agent is a 404."""

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from stepwise.tools.builtin.catalog import MEMORY_TOOLS
from stepwise_local.stack import LocalStack
from tests.fakes.openai_server import FakeOpenAI
from tests.integration.support import OTHER_KEY, wait_for_run

ALICE_FACT = "Alice drinks her coffee black with cardamom"
BOB_FACT = "Bob takes his coffee with oat milk and honey"


def agent(stack: LocalStack, **memory: Any) -> str:
    body = {"name": "remembers", "memory": {"enabled": True, **memory}}
    status, _, created = stack.invoke_api("POST", "/v1/agents", body)
    assert status == 201, created
    assert created["memory"] == {
        "enabled": True,
        "auto_recall": True,
        "top_k": 5,
        "approve_saves_after_tools": False,
        **memory,
    }
    return str(created["agent_id"])


def run(
    stack: LocalStack, agent_id: str, message: str, script: list[dict[str, Any]], **fields: Any
) -> dict[str, Any]:
    body = {"message": message, "script": script, **fields}
    status, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", body)
    assert status == 202, accepted
    return wait_for_run(stack, accepted["run_id"])


def save(content: str, **extra: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "memory_save", "arguments": {"content": content, **extra}}]}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


DONE = {"text": "done"}


def events(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0&wait=2")
    return list(page["events"])


def results(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events(stack, run_id) if e["type"] == "tool_result"]


def memories(stack: LocalStack, agent_id: str, user_id: str, **query: Any) -> list[dict[str, Any]]:
    params = "&".join(f"{k}={v}" for k, v in {"user_id": user_id, **query}.items())
    status, _, page = stack.invoke_api("GET", f"/v1/agents/{agent_id}/memories?{params}")
    assert status == 200, page
    return list(page["memories"])


def user_turn(stack: LocalStack, session_id: str) -> str:
    _, _, session = stack.invoke_api("GET", f"/v1/sessions/{session_id}")
    return str(next(m for m in session["messages"] if m["role"] == "user")["content"])


@pytest.fixture
def two_users(stack: LocalStack) -> tuple[str, dict[str, str]]:
    """One agent; Alice and Bob have each saved one memory about their coffee."""
    agent_id = agent(stack)
    ids = {}
    for user, fact in (("alice@example.com", ALICE_FACT), ("bob", BOB_FACT)):
        done = run(stack, agent_id, "remember this", [save(fact, tags=["coffee"]), DONE], user_id=user)
        assert done["status"] == "succeeded" and done["user_id"] == user, done
        (saved,) = results(stack, done["run_id"])
        ids[user] = saved["output"]["memory_id"]
    return agent_id, ids


def test_one_user_never_sees_another_users_memories(
    stack: LocalStack, two_users: tuple[str, dict[str, str]]
) -> None:
    agent_id, ids = two_users

    # Through memory_search: the same words, only Bob's own memory.
    searched = run(
        stack,
        agent_id,
        "look",
        [call("memory_search", query="coffee milk black cardamom"), DONE],
        user_id="bob",
    )
    (found,) = results(stack, searched["run_id"])
    assert [m["content"] for m in found["output"]["memories"]] == [BOB_FACT]

    # Through auto_recall: Bob's turn opens with his memory, never Alice's.
    recalled = run(stack, agent_id, "how do I take my coffee? black, cardamom?", [DONE], user_id="bob")
    turn = user_turn(stack, recalled["session_id"])
    assert (
        BOB_FACT in turn
        and ALICE_FACT not in turn
        and turn.endswith("how do I take my coffee? black, cardamom?")
    )
    started = next(e for e in events(stack, recalled["run_id"]) if e["type"] == "run_started")
    assert started["data"]["recalled_memory_ids"] == [ids["bob"]]

    # Through the API: each user lists only their own; Alice's id under Bob is a 404.
    assert [m["memory_id"] for m in memories(stack, agent_id, "bob")] == [ids["bob"]]
    (alice,) = memories(stack, agent_id, "alice@example.com")
    assert alice["content"] == ALICE_FACT and alice["tags"] == ["coffee"] and alice["source_run_id"]
    status, _, body = stack.invoke_api(
        "DELETE", f"/v1/agents/{agent_id}/memories/{ids['alice@example.com']}?user_id=bob"
    )
    assert status == 404 and body["error"]["code"] == "memory_not_found"

    # Through memory_delete in Bob's run: Alice's id is not his to delete.
    deleting = run(
        stack,
        agent_id,
        "forget",
        [call("memory_delete", memory_id=ids["alice@example.com"]), DONE],
        user_id="bob",
    )
    (refused,) = results(stack, deleting["run_id"])
    assert refused["error"]["code"] == "memory_not_found"
    assert [m["memory_id"] for m in memories(stack, agent_id, "alice@example.com")] == [
        ids["alice@example.com"]
    ]


def test_forgetting_a_user_removes_everything_of_theirs_and_nothing_else(
    stack: LocalStack, two_users: tuple[str, dict[str, str]]
) -> None:
    agent_id, ids = two_users
    more = run(
        stack, agent_id, "remember", [save("Alice lives in Lisbon"), DONE], user_id="alice@example.com"
    )
    assert more["status"] == "succeeded"

    status, _, _ = stack.invoke_api("DELETE", f"/v1/agents/{agent_id}/memories?user_id=alice@example.com")

    assert status == 204
    assert memories(stack, agent_id, "alice@example.com") == []
    assert [m["memory_id"] for m in memories(stack, agent_id, "bob")] == [ids["bob"]]
    table = boto3.resource("dynamodb").Table(stack.resolver.physical["MemoriesTable"])
    left = [i["sk"] for i in table.scan()["Items"] if i["pk"].endswith(agent_id)]
    assert left and all(sk.startswith("bob#") for sk in left)  # Bob's memory and head only
    # Nor is anything of Alice's recalled any more, in a warm function that had her memories cached.
    recalled = run(stack, agent_id, "where do I live? coffee?", [DONE], user_id="alice@example.com")
    assert "Lisbon" not in user_turn(stack, recalled["session_id"])
    # The ledger kept the saves' keys (a replay must not save them again) but none of their text.
    effects = boto3.resource("dynamodb").Table(stack.resolver.physical["EffectsTable"]).scan()["Items"]
    assert not [
        e
        for e in effects
        if "Lisbon" in json.dumps(e, default=str) or "cardamom" in json.dumps(e, default=str)
    ]


def test_another_tenants_agent_is_a_404(stack: LocalStack, two_users: tuple[str, dict[str, str]]) -> None:
    agent_id, ids = two_users
    for method, path in (
        ("GET", f"/v1/agents/{agent_id}/memories?user_id=bob"),
        ("DELETE", f"/v1/agents/{agent_id}/memories?user_id=bob"),
        ("DELETE", f"/v1/agents/{agent_id}/memories/{ids['bob']}?user_id=bob"),
    ):
        status, _, body = stack.invoke_api(method, path, key=OTHER_KEY)
        assert status == 404 and body["error"]["code"] == "agent_not_found", (method, path, body)
    assert [m["memory_id"] for m in memories(stack, agent_id, "bob")] == [ids["bob"]]


def test_a_run_without_a_user_has_no_memory_tools(stack: LocalStack) -> None:
    agent_id = agent(stack)
    # One tool of its own, so the model is offered tools at all (the scripted model answers in text
    # when it is offered none).
    status, _, _ = stack.invoke_api("POST", f"/v1/agents/{agent_id}/tools", {"name": "http_request"})
    assert status == 201

    done = run(stack, agent_id, "remember", [save("anything"), DONE])

    (result,) = results(stack, done["run_id"])
    assert done["user_id"] is None and result["error"]["code"] == "unknown_tool"


@pytest.fixture
def openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """An OpenAI-compatible model on loopback that records every request: what the model is offered."""
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    yield fake
    fake.close()


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


def test_memory_tools_are_offered_to_the_model_only_for_a_run_with_a_user(
    stack: LocalStack, openai: FakeOpenAI
) -> None:
    # Given an agent with memory on, a model behind the fake, and one tool of its own
    status, _, created = stack.invoke_api(
        "POST",
        "/v1/agents",
        {
            "name": "remembers",
            "model": "openai/gpt-fake",
            "memory": {"enabled": True},
            "tools": [{"name": "http_request"}],
        },
    )
    assert status == 201, created
    agent_id = created["agent_id"]

    # When a run without a user_id asks the model
    openai.text("nothing to remember")
    anonymous = run(stack, agent_id, "hello", [])

    # Then the model is offered the agent's own tools and no memory tool at all
    assert anonymous["status"] == "succeeded" and anonymous["user_id"] is None, anonymous
    (request,) = openai.bodies
    own = offered(request)
    assert "http_request" in own and not own & set(MEMORY_TOOLS)

    # When the same agent runs for a user, then the model is offered memory_save, _search and _delete too
    openai.text("noted")
    known = run(stack, agent_id, "hello", [], user_id="dana")
    assert known["status"] == "succeeded", known
    assert offered(openai.bodies[-1]) == own | set(MEMORY_TOOLS)
    assert set(MEMORY_TOOLS) == {"memory_save", "memory_search", "memory_delete"}


def test_a_replay_does_not_save_a_memory_twice(stack: LocalStack) -> None:
    agent_id = agent(stack)
    original = run(stack, agent_id, "remember", [save("Carol is allergic to peanuts"), DONE], user_id="carol")
    status, _, replayed = stack.invoke_api("POST", f"/v1/runs/{original['run_id']}/replay?force=true")
    assert status == 201, replayed

    again = wait_for_run(stack, replayed["run_id"])

    assert again["user_id"] == "carol" and again["session_id"] != original["session_id"]
    (result,) = results(stack, again["run_id"])
    assert result["deduplicated"] is True
    assert [m["content"] for m in memories(stack, agent_id, "carol")] == ["Carol is allergic to peanuts"]


def test_a_session_stays_its_users(stack: LocalStack) -> None:
    agent_id = agent(stack)
    first = run(stack, agent_id, "hi", [DONE], user_id="dave")

    status, _, body = stack.invoke_api(
        "POST",
        f"/v1/agents/{agent_id}/runs",
        {"message": "hi", "session_id": first["session_id"], "user_id": "erin"},
    )
    assert status == 409 and body["error"]["code"] == "session_user_mismatch"
    # Without a user_id, a run on the session is the session's user's.
    later = run(stack, agent_id, "again", [DONE], session_id=first["session_id"])
    assert later["user_id"] == "dave"


@pytest.mark.parametrize("user_id", ["", "has#hash", "x" * 129, "spa ce"])
def test_a_bad_user_id_is_a_422(stack: LocalStack, user_id: str) -> None:
    agent_id = agent(stack)
    status, _, body = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "hi", "user_id": user_id}
    )
    assert status == 422 and body["error"]["code"] == "validation_error"


def test_at_the_bound_a_save_is_refused_until_something_is_deleted(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepwise.memory import service

    monkeypatch.setattr(service, "MAX_PER_USER", 2)
    agent_id = agent(stack)
    full = run(stack, agent_id, "remember", [save("one"), save("two"), save("three"), DONE], user_id="fay")
    first, _, refused = results(stack, full["run_id"])
    assert refused["error"]["code"] == "memory_full"
    assert sorted(m["content"] for m in memories(stack, agent_id, "fay")) == ["one", "two"]

    freed = run(
        stack,
        agent_id,
        "again",
        [call("memory_delete", memory_id=first["output"]["memory_id"]), save("three"), DONE],
        user_id="fay",
    )
    assert [r.get("error") for r in results(stack, freed["run_id"])] == [None, None]
    assert sorted(m["content"] for m in memories(stack, agent_id, "fay")) == ["three", "two"]


def test_memory_tools_are_not_declared_by_hand(stack: LocalStack) -> None:
    status, _, body = stack.invoke_api(
        "POST", "/v1/agents", {"name": "x", "tools": [{"name": "memory_save"}]}
    )
    assert status == 422 and "memory.enabled" in json.dumps(body)


def test_listing_pages_newest_first(stack: LocalStack) -> None:
    agent_id = agent(stack)
    run(stack, agent_id, "remember", [save("first"), save("second"), save("third"), DONE], user_id="gus")

    status, _, page = stack.invoke_api("GET", f"/v1/agents/{agent_id}/memories?user_id=gus&limit=2")
    assert status == 200 and [m["content"] for m in page["memories"]] == ["third", "second"]
    rest = memories(stack, agent_id, "gus", limit=2, next_token=page["next_token"])
    assert [m["content"] for m in rest] == ["first"]
    status, _, body = stack.invoke_api("GET", f"/v1/agents/{agent_id}/memories?user_id=gus&next_token=forged")
    assert status == 400 and body["error"]["code"] == "invalid_next_token"
