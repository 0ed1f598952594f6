"""What-if replay on the local stack (the real ASL on moto): a recorded run with an email, an HTTP read,
an HTTP write and a database write is replayed under a new system prompt. Every effect is counted where
it would land (the receiver on loopback for the email and HTTP, a real PostgreSQL for the database), and
none lands twice; matching calls are served from the record, unmatched ones are `not_recorded` or, with
`live_reads`, run live when they only read. Approvals come from the record; nothing ever waits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.eventually import eventually
from tests.fakes.postgres import Cluster, cluster
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import OTHER_KEY, wait_for_run
from tests.integration.test_delegation import agent, agent_tool, ask, events, of_type, pending, start

SEND_EMAIL = {
    "type": "http",
    "name": "send_email",
    "description": "Send an email.",
    "input_schema": {
        "type": "object",
        "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "body"],
    },
}
INSERT = "INSERT INTO orders (id, note) VALUES (100, 'shipped')"


@pytest.fixture(scope="module")
def database(stack: LocalStack) -> Iterator[Cluster]:
    """A PostgreSQL with an orders table, the tenant's DATABASE_URL for this module only."""
    from stepwise.settings.accessor import invalidate

    with cluster() as db:
        db.sql("CREATE TABLE orders (id int PRIMARY KEY, note text)")
        status, _, body = stack.invoke_api("PUT", "/v1/settings/DATABASE_URL", {"value": db.url()})
        assert status == 200, body
        invalidate(DEFAULT_TENANT)
        yield db
        stack.invoke_api("DELETE", "/v1/settings/DATABASE_URL")
        invalidate(DEFAULT_TENANT)


def rows(db: Cluster) -> int:
    with psycopg.connect(db.url(), autocommit=True) as connection:
        found = connection.execute("SELECT count(*) FROM orders").fetchone()
    assert found is not None
    return int(found[0])


def http(receiver: Receiver, method: str, path: str, **extra: Any) -> dict[str, Any]:
    return {"name": "http_request", "arguments": {"method": method, "url": f"{receiver.url}{path}", **extra}}


def email(to: str) -> dict[str, Any]:
    return {"name": "send_email", "arguments": {"to": to, "body": "Your order shipped"}}


WRITE = {"name": "database_write", "arguments": {"query": INSERT}}


@pytest.fixture
def recorded(stack: LocalStack, receiver: Receiver, database: Cluster) -> dict[str, Any]:
    """The original: an HTTP read and an email, then an HTTP write and a database write, all performed."""
    receiver.replies["/orders/1"] = Reply(body={"id": 1, "status": "paid"})
    receiver.replies["/send_email"] = Reply(body={"message_id": "m-1"})
    database.sql("DELETE FROM orders")
    shop = agent(
        stack,
        "shop",
        system_prompt="You run a shop.",
        tools=[
            {**SEND_EMAIL, "endpoint": f"{receiver.url}/send_email"},
            {"name": "http_request"},
            {"name": "database_write", "config": {"allowed_tables": ["orders"]}},
        ],
    )
    script: list[dict[str, Any]] = [
        {"tool_calls": [http(receiver, "GET", "/orders/1"), email("ada@example.com")]},
        {"tool_calls": [http(receiver, "POST", "/orders", body={"id": 100}), WRITE]},
        {"text": "Order 100 is recorded and Ada was told."},
    ]
    run = wait_for_run(stack, start(stack, shop, script)["run_id"])
    assert run["status"] == "succeeded", run
    assert (len(receiver.requests), rows(database)) == (3, 1)
    return run


def what_if(stack: LocalStack, run_id: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    status, _, created = stack.invoke_api("POST", f"/v1/runs/{run_id}/what-if", body, **kwargs)
    assert status == 201, created
    return wait_for_run(stack, created["run_id"])


def results(stack: LocalStack, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's tool results by tool call, with the tool_call event's arguments beside each."""
    log = events(stack, run_id)
    asked = {c["tool_call_id"]: c["arguments"] for c in of_type(log, "tool_call")}
    return {
        r["tool_call_id"]: {**r, "arguments": asked[r["tool_call_id"]]} for r in of_type(log, "tool_result")
    }


def test_a_what_if_performs_no_effect_and_serves_every_matching_call(
    stack: LocalStack, receiver: Receiver, database: Cluster, recorded: dict[str, Any]
) -> None:
    script = [
        {"tool_calls": [http(receiver, "GET", "/orders/1"), email("ada@example.com")]},
        {
            "tool_calls": [
                http(receiver, "POST", "/orders", body={"id": 100}),
                WRITE,
                email("grace@example.com"),  # a write the original never made
                http(receiver, "GET", "/orders/2"),  # a read it never made: no live reads asked for
            ]
        },
        {"text": "Done, tersely."},
    ]
    run = what_if(stack, recorded["run_id"], {"system_prompt": "Be terse.", "script": script})

    # Not one effect reached anything: the receiver (email, HTTP) and the database saw nothing new.
    assert (len(receiver.requests), rows(database)) == (3, 1)
    assert (run["status"], run["output"], run["trigger"], run["what_if_of"]) == (
        "succeeded",
        "Done, tersely.",
        "what_if",
        recorded["run_id"],
    )
    assert (run["served"], run["live_reads"], run["divergences"]) == (4, 0, 2)
    assert run["what_if"]["system_prompt"] == "Be terse." and run["tools_executed"] == []
    original_results = results(stack, recorded["run_id"])
    by_tool = {(r["tool_name"], str(r["arguments"])): r for r in original_results.values()}
    served = [r for r in results(stack, run["run_id"]).values() if "served_from" in r]
    assert len(served) == 4
    for result in served:  # each served the original's own result, of the same call
        origin = original_results[result["served_from"]]
        assert by_tool[(result["tool_name"], str(result["arguments"]))] is origin
        assert result["output"] == origin["output"]
    refused = [r for r in results(stack, run["run_id"]).values() if "served_from" not in r]
    assert sorted((r["tool_name"], r["error"]["code"], r["diverged"]) for r in refused) == [
        ("http_request", "not_recorded", True),
        ("send_email", "not_recorded", True),
    ]
    # A session of its own: the original's session was not extended.
    assert run["session_id"] != recorded["session_id"]
    _, _, session = stack.invoke_api("GET", f"/v1/sessions/{recorded['session_id']}")
    assert [r["run_id"] for r in session["runs"]] == [recorded["run_id"]]


def test_live_reads_run_an_unmatched_read_and_nothing_else(
    stack: LocalStack, receiver: Receiver, database: Cluster, recorded: dict[str, Any]
) -> None:
    receiver.replies["/orders/2"] = Reply(body={"id": 2, "status": "open"})
    script = [
        {
            "tool_calls": [
                http(receiver, "GET", "/orders/2"),
                http(receiver, "POST", "/orders", body={"id": 101}),
                email("grace@example.com"),
                {"name": "database_write", "arguments": {"query": "DELETE FROM orders"}},
            ]
        },
        {"text": "Looked at order 2."},
    ]
    run = what_if(stack, recorded["run_id"], {"live_reads": True, "script": script})

    assert [(r.method, r.path) for r in receiver.requests[3:]] == [("GET", "/orders/2")]
    assert rows(database) == 1
    assert (run["served"], run["live_reads"], run["divergences"]) == (0, 1, 3)
    assert run["tools_executed"] == ["http_request"]
    live = [r for r in results(stack, run["run_id"]).values() if r.get("live")]
    assert [r["output"]["body"] for r in live] == [{"id": 2, "status": "open"}]


def test_match_by_name_serves_the_next_unused_call_of_the_tool(
    stack: LocalStack, receiver: Receiver, recorded: dict[str, Any]
) -> None:
    script = [
        {"tool_calls": [email("grace@example.com")]},
        {"tool_calls": [email("alan@example.com")]},
        {"text": "Mailed."},
    ]
    run = what_if(stack, recorded["run_id"], {"match": "name", "script": script})

    assert len(receiver.to("/send_email")) == 1
    assert (run["served"], run["divergences"]) == (1, 1)
    first, second = results(stack, run["run_id"]).values()
    assert first["output"] == {"message_id": "m-1"} and "served_from" in first
    assert second["error"]["code"] == "not_recorded"


def test_the_comparison_names_the_first_divergence(
    stack: LocalStack, receiver: Receiver, recorded: dict[str, Any]
) -> None:
    script = [
        {"tool_calls": [http(receiver, "GET", "/orders/1"), email("grace@example.com")]},
        {"text": "Told Grace."},
    ]
    run = what_if(stack, recorded["run_id"], {"model": "scripted", "script": script})

    status, _, compared = stack.invoke_api("GET", f"/v1/runs/{recorded['run_id']}/compare/{run['run_id']}")
    assert status == 200, compared
    divergence = compared["first_divergence"]
    assert (divergence["index"], divergence["reason"]) == (1, "arguments")
    assert divergence["a"]["arguments"]["to"] == "ada@example.com"
    assert (divergence["b"]["status"], divergence["b"]["error"]) == ("diverged", "not_recorded")
    assert [c["status"] for c in compared["a"]["trajectory"]] == [
        "matched",
        "executed",
        "executed",
        "executed",
    ]
    assert [c["status"] for c in compared["b"]["trajectory"]] == ["served", "diverged"]
    assert compared["b"]["trajectory"][0]["served_from"] == compared["a"]["trajectory"][0]["call_id"]
    assert (compared["a"]["output"], compared["b"]["output"]) == (recorded["output"], "Told Grace.")
    assert compared["deltas"]["steps"] == run["steps"] - recorded["steps"] == -1
    summary = compared["summary"]
    assert (summary["same_answer"], summary["served"], summary["divergences"]) == (False, 1, 1)
    assert summary["first_divergence_index"] == 1


def test_another_tenant_s_run_is_not_found(stack: LocalStack, recorded: dict[str, Any]) -> None:
    run_id = recorded["run_id"]
    assert stack.invoke_api("POST", f"/v1/runs/{run_id}/what-if", {}, key=OTHER_KEY)[0] == 404
    assert stack.invoke_api("GET", f"/v1/runs/{run_id}/compare/{run_id}", key=OTHER_KEY)[0] == 404
    status, _, body = stack.invoke_api("POST", f"/v1/runs/{run_id}/what-if", {"temperature": 9})
    assert status == 422, body


def test_approvals_are_answered_from_the_record_and_nothing_waits(
    stack: LocalStack, receiver: Receiver
) -> None:
    mailer = agent(
        stack,
        "careful",
        tools=[{**SEND_EMAIL, "endpoint": f"{receiver.url}/send_email", "permission": "ask"}],
    )
    script: list[dict[str, Any]] = [
        {"tool_calls": [email("ada@example.com")]},
        {"tool_calls": [email("grace@example.com")]},
        {"text": "Asked twice."},
    ]
    accepted = start(stack, mailer, script)
    asking(stack, accepted["session_id"], "ada@example.com")
    status, _, refused = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/what-if", {})
    assert (status, refused["error"]["code"]) == (409, "run_active")  # a what-if replays a finished run
    for to, approved in (("ada@example.com", True), ("grace@example.com", False)):  # Ada yes, Grace no
        asked = asking(stack, accepted["session_id"], to)
        status, _, body = stack.invoke_api(
            "POST",
            f"/v1/sessions/interactions/{asked}/respond",
            {"answer": {"approved": approved, "reason": "not her"}},
            headers={"Idempotency-Key": asked},
        )
        assert status == 202, body
    original = wait_for_run(stack, accepted["run_id"])
    assert original["status"] == "succeeded" and len(receiver.to("/send_email")) == 1

    replay_script = [*script[:2], {"tool_calls": [email("alan@example.com")]}, {"text": "Asked thrice."}]
    run = what_if(stack, original["run_id"], {"script": replay_script})

    assert len(receiver.to("/send_email")) == 1
    assert (run["status"], run["served"], run["divergences"]) == ("succeeded", 2, 1)
    log = events(stack, run["run_id"])
    assert of_type(log, "approval_requested") == []
    _, _, waited = stack.invoke_api("GET", f"/v1/sessions/{run['session_id']}/interactions")
    assert waited["interactions"] == []
    ada, grace, alan = of_type(log, "tool_result")
    assert ada["output"] == {"ok": True} and "served_from" in ada
    assert grace["error"]["code"] == "denied" and "served_from" in grace
    assert (alan["error"]["code"], alan["reason"]) == ("denied", "what_if")


def asking(stack: LocalStack, session_id: str, to: str) -> str:
    """The pending approval of the email to `to`, once the run asks for it."""

    def found() -> str:
        waiting = pending(stack, session_id)
        found = [i for i in waiting if i["arguments"]["to"] == to]
        assert len(found) == 1, (to, waiting, stack.invoke_api("GET", f"/v1/sessions/{session_id}")[2])
        (interaction,) = found
        return str(interaction["interaction_id"])

    return eventually(found, timeout=30, what=f"the approval of the email to {to}")


def test_the_overrides_apply_to_the_what_if_alone(
    stack: LocalStack, receiver: Receiver, recorded: dict[str, Any]
) -> None:
    mailer = agent(stack, "mailer", tools=[{**SEND_EMAIL, "endpoint": f"{receiver.url}/send_email"}])
    script = [{"tool_calls": [http(receiver, "GET", "/orders/1"), email("ada@example.com")]}, {"text": "ok"}]
    body = {"agent_id": mailer, "max_steps": 3, "temperature": 0.2, "script": script}

    run = what_if(stack, recorded["run_id"], body)

    # The other agent has no http_request: its own gating refuses the call, a divergence; the email matches.
    assert (run["agent_id"], run["max_steps"], run["served"], run["divergences"]) == (mailer, 3, 1, 1)
    refused, served = results(stack, run["run_id"]).values()
    assert (refused["error"]["code"], served["output"]) == ("unknown_tool", {"message_id": "m-1"})
    only_mail = {"tools": [{**SEND_EMAIL, "endpoint": f"{receiver.url}/send_email"}], "script": script}
    again = what_if(stack, recorded["run_id"], only_mail)
    assert (again["agent_id"], again["served"], again["divergences"]) == (recorded["agent_id"], 1, 1)
    assert len(receiver.requests) == 3


def test_a_delegation_is_served_from_the_child_s_recorded_answer_and_starts_no_child(
    stack: LocalStack,
) -> None:
    researcher = agent(stack, "researcher")  # no tools: the scripted model echoes its message
    coordinator = agent(stack, "coordinator", tools=[agent_tool("research", researcher)])
    script: list[dict[str, Any]] = [
        {"tool_calls": [ask("research", "the tallest tree")]},
        {"text": "reported"},
    ]
    original = wait_for_run(stack, start(stack, coordinator, script)["run_id"])
    assert original["status"] == "succeeded" and len(original["children"]) == 1

    replay_script = [
        {"tool_calls": [ask("research", "the tallest tree"), ask("research", "the oldest tree")]},
        {"text": "reported again"},
    ]
    run = what_if(stack, original["run_id"], {"script": replay_script})

    assert (run["children"], run["served"], run["divergences"]) == ([], 1, 1)
    log = events(stack, run["run_id"])
    assert of_type(log, "delegation_started") == []
    served, unmatched = of_type(log, "tool_result")
    assert served["output"] == "You said: the tallest tree"
    assert unmatched["error"]["code"] == "not_recorded"


def test_a_memory_the_original_saved_is_not_saved_again(stack: LocalStack) -> None:
    remembers = agent(stack, "remembers", memory={"enabled": True})
    save = {"name": "memory_save", "arguments": {"content": "prefers tea"}}
    other = {"name": "memory_save", "arguments": {"content": "prefers coffee"}}
    original = wait_for_run(
        stack, start(stack, remembers, [{"tool_calls": [save]}, {"text": "noted"}], user_id="u-1")["run_id"]
    )
    assert original["status"] == "succeeded"

    run = what_if(stack, original["run_id"], {"script": [{"tool_calls": [save, other]}, {"text": "noted"}]})

    assert (run["served"], run["divergences"], run["user_id"]) == (1, 1, "u-1")
    _, _, listed = stack.invoke_api("GET", f"/v1/agents/{remembers}/memories?user_id=u-1")
    assert [m["content"] for m in listed["memories"]] == ["prefers tea"]


def test_a_client_tool_is_answered_as_the_app_answered_it(stack: LocalStack) -> None:
    from tests.integration.test_client_tools import respond, waiting_on_client

    waiting = waiting_on_client(stack)
    (interaction,) = waiting["interactions"]
    assert respond(stack, interaction, "pick-1", output={"file": "report.pdf"})[0] == 202
    original = wait_for_run(stack, waiting["run_id"])
    assert original["status"] == "succeeded"

    pick = [{"name": "pick_file", "arguments": {"kind": f"k{i}"}} for i in range(2)]
    run = what_if(stack, original["run_id"], {"script": [{"tool_calls": pick}, {"text": "thanks"}]})

    assert (run["status"], run["served"], run["divergences"]) == ("succeeded", 1, 1)
    log = events(stack, run["run_id"])
    assert of_type(log, "client_tool_requested") == []
    answered, unmatched = of_type(log, "tool_result")
    assert answered["output"] == {"file": "report.pdf"}
    assert (unmatched["error"]["code"], unmatched["reason"]) == ("denied", "what_if")
