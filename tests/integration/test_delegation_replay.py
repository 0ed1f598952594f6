"""Replaying a parent replays its tree through the effects ledger: the child of the replay derives its
trigger from the parent's (kept by the replay) and the call's place, so its idempotent email is the
same effect as the original child's and is not sent again (the real ASL on moto, a receiver on
loopback that counts what actually arrived)."""

from __future__ import annotations

from typing import Any

from stepwise import ledger
from stepwise.ledger import store as effects
from stepwise.store import runs
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import wait_for_run
from tests.integration.test_delegation import agent, agent_tool, ask, events, get_run, of_type, start

SEND_EMAIL = {
    "type": "http",
    "name": "send_email",
    "description": "Send an email.",
    "input_schema": {
        "type": "object",
        "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
        "required": ["to", "body"],
    },
    "effect": "idempotent",
    "key_fields": ["to"],
}


def tree(stack: LocalStack, receiver: Receiver) -> tuple[str, str]:
    """A coordinator whose agent tool starts a mailer, whose own script sends one email."""
    mailer = agent(
        stack,
        "mailer",
        tools=[{**SEND_EMAIL, "endpoint": f"{receiver.url}/send_email"}],
        script=[
            {"tool_calls": [{"name": "send_email", "arguments": {"to": "Anna@Acme.com", "body": "Hi"}}]},
            {"text": "mailed Anna"},
        ],
    )
    return agent(stack, "coordinator", tools=[agent_tool("mail", mailer)]), mailer


def child_of(stack: LocalStack, run: dict[str, Any]) -> dict[str, Any]:
    (child_id,) = run["children"]
    return get_run(stack, child_id)


def test_a_replayed_parent_s_child_sends_its_idempotent_email_once(
    stack: LocalStack, receiver: Receiver
) -> None:
    receiver.replies["/send_email"] = Reply(body={"message_id": "m-1"})
    coordinator, mailer = tree(stack, receiver)
    script = [{"tool_calls": [ask("mail", "tell Anna")]}, {"text": "Anna was told"}]
    original = wait_for_run(stack, start(stack, coordinator, script)["run_id"])
    assert original["status"] == "succeeded", original
    assert len(receiver.to("/send_email")) == 1

    status, _, accepted = stack.invoke_api("POST", f"/v1/runs/{original['run_id']}/replay?force=true")
    assert status == 201, accepted
    replay = wait_for_run(stack, accepted["run_id"])

    # The receiver saw the email once, across both trees.
    assert len(receiver.to("/send_email")) == 1
    # The replayed tree is whole and right: a new child, answering as the first did.
    assert (replay["status"], replay["output"], replay["replay_of"]) == (
        "succeeded",
        "Anna was told",
        original["run_id"],
    )
    first_child, second_child = child_of(stack, original), child_of(stack, replay)
    assert second_child["run_id"] != first_child["run_id"]
    assert (second_child["status"], second_child["output"]) == ("succeeded", "mailed Anna")
    assert (second_child["parent_run_id"], second_child["trigger"]) == (replay["run_id"], "delegation")
    (delegated,) = of_type(events(stack, replay["run_id"]), "tool_result")
    assert delegated["output"] == "mailed Anna"
    # The replayed child's call found the original's effect in the ledger and read its stored result.
    (original_send,) = of_type(events(stack, first_child["run_id"]), "tool_result")
    (replayed_send,) = of_type(events(stack, second_child["run_id"]), "tool_result")
    assert "deduplicated" not in original_send
    assert replayed_send["deduplicated"] is True
    assert replayed_send["output"] == original_send["output"] == {"message_id": "m-1"}
    stored = [runs.get(DEFAULT_TENANT, r["run_id"]) for r in (first_child, second_child)]
    assert stored[0].trigger_id == stored[1].trigger_id
    assert stored[0].trigger_id is not None and stored[0].trigger_id.startswith(
        f"delegation:{original['run_id']}>"
    )
    scope = ledger.CallScope(
        tenant_id=DEFAULT_TENANT,
        agent_id=mailer,
        run_id="-",
        trigger_id=stored[0].trigger_id,
        step=0,
        tool_call_id="-",
    )
    key = ledger.effect_key(scope, "send_email", ["to"], {"to": "anna@acme.com"})
    assert replayed_send["effect_key"] == key.id
    entry = effects.get(DEFAULT_TENANT, key.id)
    assert entry is not None and (entry.status, entry.generation, entry.run_id) == (
        "done",
        1,
        first_child["run_id"],
    )


def test_a_new_run_of_the_same_tree_is_a_new_effect(stack: LocalStack, receiver: Receiver) -> None:
    """The counterpart: what the replay deduplicates is its original's intent, not every email to Anna."""
    coordinator, _ = tree(stack, receiver)
    script = [{"tool_calls": [ask("mail", "tell Anna")]}, {"text": "Anna was told"}]

    for _ in range(2):
        run = wait_for_run(stack, start(stack, coordinator, script)["run_id"])
        assert run["status"] == "succeeded", run

    assert len(receiver.to("/send_email")) == 2
