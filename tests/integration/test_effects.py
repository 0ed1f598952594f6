"""The effects ledger in whole runs: the real ASL on moto, the Gate in process, DynamoDB in moto and a
webhook receiver on loopback that counts what actually arrived.

Replays are simulated by starting runs with the same trigger (`start_run(..., trigger_id=...)`), which
is what POST /v1/runs/{id}/replay does. Crashes are injected inside the Gate: the handler raises
`GateCrashed`, which the local stack reports as the Lambda's errorType, so the tests add a Retry for that
name to the Gate (the template retries only the Lambda service's own errors, which a handler exception
never is). Step Functions then runs the Gate again, exactly as after a crash in AWS.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise import ledger
from stepwise.core.errors import Conflict, NotFound
from stepwise.ledger import store as effects
from stepwise.runs.models import RunCreate
from stepwise.runs.start import start_run
from stepwise.sessions.models import tool_slot
from stepwise.store import sessions
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import wait_for_run

TENANT = DEFAULT_TENANT
SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
    "required": ["to"],
}


class GateCrashed(Exception):
    """The Step dies mid-call (in the ledger or the store, not in the tool); its name is the
    errorType Step Functions sees."""


def retry_gate_crashes(definition: dict[str, Any]) -> dict[str, Any]:
    step = definition["States"]["Step"]
    step["Retry"] = [{"ErrorEquals": ["GateCrashed"], "IntervalSeconds": 1, "MaxAttempts": 2}, *step["Retry"]]
    return definition


def agent(stack: LocalStack, receiver: Receiver, effect: str = "idempotent") -> str:
    send: dict[str, Any] = {
        "type": "http",
        "name": "send",
        "description": "send a message",
        "input_schema": SCHEMA,
        "endpoint": f"{receiver.url}/send",
        "effect": effect,
    }
    if effect == "idempotent":
        send["key_fields"] = ["to"]
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "effects", "tools": [send]})
    assert status == 201, created
    return str(created["agent_id"])


def sends_to(to: str, body: str = "Hello") -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": "send", "arguments": {"to": to, "body": body}}]}, {"text": "sent"}]


def run(stack: LocalStack, agent_id: str, trigger: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    body = RunCreate.model_validate({"message": "go", "script": script})
    started = start_run(TENANT, agent_id, body, trigger_id=trigger)
    finished = wait_for_run(stack, started.run_id)
    assert finished["status"] == "succeeded", finished
    return finished


def new_trigger() -> str:
    return f"event:{uuid.uuid4().hex}"


def tool_results(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        status, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait=5")
        assert status == 200, page
        events += page["events"]
        after = page["next"]
        if page["done"]:
            return [e["data"] for e in events if e["type"] == "tool_result"]


def tool_message(run: dict[str, Any]) -> str:
    (message,) = [
        m for m in sessions.messages(TENANT, run["session_id"], {run["run_id"]}) if m.get("role") == "tool"
    ]
    return str(message["content"])


def effect_of(agent_id: str, trigger: str, to: str) -> ledger.EffectKey:
    """The key the ledger builds for `send` to `to` (the step and tool call do not enter it)."""
    scope = ledger.CallScope(
        tenant_id=TENANT, agent_id=agent_id, run_id="-", trigger_id=trigger, step=0, tool_call_id="-"
    )
    return ledger.effect_key(scope, "send", ["to"], {"to": to})


def key_of(agent_id: str, trigger: str, to: str) -> str:
    return effect_of(agent_id, trigger, to).id


# --- Replays: the same trigger ---------------------------------------------------------------------


def test_a_replay_of_the_same_intent_gets_the_stored_result(stack: LocalStack, receiver: Receiver) -> None:
    receiver.replies["/send"] = Reply(body={"message_id": "m-1"})
    agent_id, trigger = agent(stack, receiver), new_trigger()

    first = run(stack, agent_id, trigger, sends_to("anna@acme.com", "Hi Anna, following up"))
    replay = run(stack, agent_id, trigger, sends_to(" Anna@Acme.com", "Hello Anna, about your quote"))

    assert len(receiver.to("/send")) == 1
    (request,) = receiver.to("/send")
    assert request.headers["idempotency-key"] == ledger.idempotency_header(
        effect_of(agent_id, trigger, "anna@acme.com"), 1
    )
    (original,) = tool_results(stack, first["run_id"])
    (deduplicated,) = tool_results(stack, replay["run_id"])
    assert original["output"] == deduplicated["output"] == {"message_id": "m-1"}
    assert "deduplicated" not in original
    assert deduplicated["deduplicated"] is True
    assert deduplicated["effect_key"] == key_of(agent_id, trigger, "anna@acme.com")
    assert tool_message(replay) == tool_message(first)  # the model reads the same result
    entry = effects.get(TENANT, key_of(agent_id, trigger, "anna@acme.com"))
    assert entry is not None and (entry.status, entry.generation, entry.run_id) == (
        "done",
        1,
        first["run_id"],
    )


def test_a_replay_through_the_api_keeps_the_trigger(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent(stack, receiver)
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go", "script": sends_to("bo@acme.com")}
    )
    assert status == 202, accepted
    wait_for_run(stack, accepted["run_id"])

    status, _, replayed = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/replay?force=true")
    assert status == 201, replayed
    wait_for_run(stack, replayed["run_id"])

    assert len(receiver.to("/send")) == 1
    assert tool_results(stack, replayed["run_id"])[0]["deduplicated"] is True


def test_another_target_is_another_effect(stack: LocalStack, receiver: Receiver) -> None:
    agent_id, trigger = agent(stack, receiver), new_trigger()

    run(stack, agent_id, trigger, sends_to("anna@acme.com"))
    run(stack, agent_id, trigger, sends_to("bob@acme.com"))

    assert [r.json()["to"] for r in receiver.to("/send")] == ["anna@acme.com", "bob@acme.com"]


def test_another_trigger_is_another_effect(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent(stack, receiver)

    run(stack, agent_id, new_trigger(), sends_to("anna@acme.com"))
    run(stack, agent_id, new_trigger(), sends_to("anna@acme.com"))

    assert len(receiver.to("/send")) == 2


@pytest.mark.parametrize("effect", ["none", "undeclared"])
def test_tools_without_an_effect_key_run_in_every_run(
    stack: LocalStack, receiver: Receiver, effect: str
) -> None:
    agent_id, trigger = agent(stack, receiver, effect), new_trigger()

    runs = [run(stack, agent_id, trigger, sends_to("anna@acme.com")) for _ in range(2)]

    assert len(receiver.to("/send")) == 2
    assert all("deduplicated" not in tool_results(stack, r["run_id"])[0] for r in runs)
    keys = [r.headers["idempotency-key"] for r in receiver.to("/send")]
    assert len(set(keys)) == 2 and all(k.startswith("sw-") for k in keys)  # per call, for the provider


def test_done_then_undone_runs_again(stack: LocalStack, receiver: Receiver) -> None:
    agent_id, trigger = agent(stack, receiver), new_trigger()
    key = key_of(agent_id, trigger, "anna@acme.com")
    run(stack, agent_id, trigger, sends_to("anna@acme.com"))

    undone = ledger.mark_undone(TENANT, key, "ops@acme.com", store=effects)
    again = run(stack, agent_id, trigger, sends_to("anna@acme.com"))
    third = run(stack, agent_id, trigger, sends_to("anna@acme.com"))

    assert undone.status == "undone" and undone.undone_by == "ops@acme.com"
    requests = receiver.to("/send")
    assert len(requests) == 2
    assert requests[0].headers["idempotency-key"] != requests[1].headers["idempotency-key"]
    assert "deduplicated" not in tool_results(stack, again["run_id"])[0]
    assert tool_results(stack, third["run_id"])[0]["generation"] == 2
    entry = effects.get(TENANT, key)
    assert entry is not None and (entry.status, entry.generation) == ("done", 2)
    assert [(h["generation"], h["status"], h["undone_by"]) for h in entry.history] == [
        (1, "done", "ops@acme.com")
    ]


def test_undo_needs_something_to_undo(stack: LocalStack, receiver: Receiver) -> None:
    agent_id, trigger = agent(stack, receiver), new_trigger()
    key = key_of(agent_id, trigger, "anna@acme.com")
    run(stack, agent_id, trigger, sends_to("anna@acme.com"))
    ledger.mark_undone(TENANT, key, "ops", store=effects)

    with pytest.raises(Conflict, match="nothing to undo"):
        ledger.mark_undone(TENANT, key, "ops", store=effects)
    with pytest.raises(NotFound, match="no ledger entry"):
        ledger.mark_undone("other", key, "ops", store=effects)  # the tenant is part of the key


@pytest.mark.parametrize(("status", "requests", "entry_status"), [(500, 1, "unknown"), (400, 2, "released")])
def test_a_failed_call_blocks_or_releases_its_key(
    stack: LocalStack, receiver: Receiver, status: int, requests: int, entry_status: str
) -> None:
    receiver.replies["/send"] = Reply(status=status, body={"error": "nope"})
    agent_id, trigger = agent(stack, receiver), new_trigger()

    first = run(stack, agent_id, trigger, sends_to("anna@acme.com"))
    entry = effects.get(TENANT, key_of(agent_id, trigger, "anna@acme.com"))
    assert entry is not None and entry.status == entry_status
    second = run(stack, agent_id, trigger, sends_to("anna@acme.com"))

    assert len(receiver.to("/send")) == requests
    assert tool_results(stack, first["run_id"])[0]["error"]["code"] == "http_error"
    later = tool_results(stack, second["run_id"])[0]["error"]["code"]
    assert later == ("effect_unknown" if entry_status == "unknown" else "http_error")


# --- Crashes inside the Gate -----------------------------------------------------------------------


@pytest.fixture
def crash_before_confirm(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The tool has acted; the Gate dies before the ledger records the outcome."""
    crashed: list[str] = []
    settle = effects.settle

    def crash_once(*args: Any, **kwargs: Any) -> bool:
        if not crashed:
            crashed.append("settle")
            raise GateCrashed("the Lambda died between the effect and the ledger's confirm")
        return settle(*args, **kwargs)

    monkeypatch.setattr(effects, "settle", crash_once)
    yield crashed


@pytest.fixture
def crash_before_storing(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The ledger has confirmed; the Gate dies before the tool's result message is stored."""
    crashed: list[str] = []
    put_message = sessions.put_message

    def crash_once(tenant_id: str, session_id: str, run_id: str, step: int, slot: str, message: Any) -> None:
        if slot.startswith(tool_slot(0)[:2]) and not crashed:
            crashed.append(slot)
            raise GateCrashed("the Lambda died before the result was stored")
        put_message(tenant_id, session_id, run_id, step, slot, message)

    monkeypatch.setattr(sessions, "put_message", crash_once)
    yield crashed


@pytest.mark.parametrize("effect", ["idempotent", "undeclared"])
def test_a_crash_between_the_effect_and_its_confirm_is_never_rerun(
    stack: LocalStack, receiver: Receiver, crash_before_confirm: list[str], effect: str
) -> None:
    agent_id = agent(stack, receiver, effect)

    with stack.redefined(retry_gate_crashes):
        crashed = run(stack, agent_id, new_trigger(), sends_to("anna@acme.com"))

    assert crash_before_confirm == ["settle"]  # the crash happened, and the Gate was retried
    assert len(receiver.to("/send")) == 1
    (result,) = tool_results(stack, crashed["run_id"])
    assert result["error"]["code"] == "effect_unknown"
    assert "may or may not have happened" in result["error"]["message"]
    assert "effect_unknown" in tool_message(crashed)
    entry = effects.get(TENANT, result["effect_key"])
    assert entry is not None and entry.status == "claimed" and entry.run_id == crashed["run_id"]


@pytest.mark.parametrize(("effect", "requests"), [("idempotent", 1), ("undeclared", 1), ("none", 2)])
def test_a_crash_after_the_confirm_answers_from_the_ledger(
    stack: LocalStack, receiver: Receiver, crash_before_storing: list[str], effect: str, requests: int
) -> None:
    receiver.replies["/send"] = Reply(body={"message_id": "m-7"})
    agent_id = agent(stack, receiver, effect)

    with stack.redefined(retry_gate_crashes):
        crashed = run(stack, agent_id, new_trigger(), sends_to("anna@acme.com"))

    assert crash_before_storing  # the crash happened, and the Gate was retried
    assert len(receiver.to("/send")) == requests  # only a pure tool runs again
    (result,) = tool_results(stack, crashed["run_id"])
    assert result["output"] == {"message_id": "m-7"}
    assert result.get("deduplicated", False) is (effect != "none")
