"""People resolving the effects ledger through the API (GET /v1/effects, POST /v1/effects/{key}/resolve):
an effect left unknown by a 5xx is listed with its masked arguments, and a person's `done` or `undone`
decides what the next run of the same trigger does. Runs share a trigger as a replay does (see
test_effects.py)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from stepwise import ledger
from stepwise.core.schema import utcnow
from stepwise.core.tables import EffectItem
from stepwise.ledger import store as effects
from stepwise.runs.models import RunCreate
from stepwise.runs.start import start_run
from stepwise.store import keys
from stepwise_local.stack import DEFAULT_KEY, DEFAULT_TENANT, LocalStack
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import OTHER_KEY, wait_for_run

TENANT = DEFAULT_TENANT
SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "api_token": {"type": "string"}},
    "required": ["to"],
}


@pytest.fixture(scope="module")
def ops_key() -> str:
    """A key a person named, so the resolution says who."""
    key = keys.generate_key()
    keys.store_key(key, TENANT, name="ops-oncall")
    return key


def agent(stack: LocalStack, receiver: Receiver) -> str:
    send = {
        "type": "http",
        "name": "send",
        "description": "send a message",
        "input_schema": SCHEMA,
        "endpoint": f"{receiver.url}/send",
        "effect": "idempotent",
        "key_fields": ["to"],
    }
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "review", "tools": [send]})
    assert status == 201, created
    return str(created["agent_id"])


def run(stack: LocalStack, agent_id: str, trigger: str) -> dict[str, Any]:
    call = {"name": "send", "arguments": {"to": "anna@acme.com", "api_token": "tok-secret-1"}}
    body = RunCreate.model_validate({"message": "go", "script": [{"tool_calls": [call]}, {"text": "sent"}]})
    finished = wait_for_run(stack, start_run(TENANT, agent_id, body, trigger_id=trigger).run_id, timeout=180)
    assert finished["status"] == "succeeded", finished
    return finished


def tool_result(stack: LocalStack, run_id: str) -> dict[str, Any]:
    status, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0")
    assert status == 200, page
    (found,) = [e["data"] for e in page["events"] if e["type"] == "tool_result"]
    return dict(found)


def listed(stack: LocalStack, query: str, key: str = DEFAULT_KEY) -> list[dict[str, Any]]:
    """Every entry the filter lets through, page after page (the filters apply after the read, and
    the stack's tenant has other tests' entries)."""
    found: list[dict[str, Any]] = []
    token = None
    while True:
        after = f"&next_token={token}" if token else ""
        status, _, page = stack.invoke_api("GET", f"/v1/effects?{query}&limit=100{after}", key=key)
        assert status == 200, page
        found += page["effects"]
        token = page["next_token"]
        if token is None:
            return found


def unknown_effect(stack: LocalStack, receiver: Receiver) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """A run whose `send` got a 502: the ledger cannot know whether it acted."""
    receiver.once["/send"] = [Reply(status=502, body={"error": "gateway"})]
    receiver.replies["/send"] = Reply(body={"message_id": "m-1"})
    agent_id, trigger = agent(stack, receiver), f"event:{uuid.uuid4().hex}"
    first = run(stack, agent_id, trigger)
    (entry,) = listed(stack, f"status=unknown&run_id={first['run_id']}")
    return agent_id, trigger, first, entry


def test_an_unknown_effect_is_listed_and_done_makes_the_replay_deduplicated(
    stack: LocalStack, receiver: Receiver, ops_key: str
) -> None:
    agent_id, trigger, first, entry = unknown_effect(stack, receiver)

    assert entry["tool"] == "send" and entry["status"] == "unknown" and entry["run_id"] == first["run_id"]
    assert entry["key"].startswith("effect:") and entry["kind"] == "effect"
    assert entry["arguments"] == {"to": "anna@acme.com", "api_token": "********"}
    assert entry["error"]["code"] == "http_error" and entry["resolution"] is None
    blocked = run(stack, agent_id, trigger)
    assert tool_result(stack, blocked["run_id"])["error"]["code"] == "effect_unknown"
    assert entry["key"] in tool_result(stack, blocked["run_id"])["error"]["message"]

    status, _, resolved = stack.invoke_api(
        "POST",
        f"/v1/effects/{entry['key']}/resolve",
        {"outcome": "done", "note": "the provider's log shows it sent"},
        key=ops_key,
    )

    assert status == 200, resolved
    assert resolved["status"] == "done"
    resolution = resolved["resolution"]
    assert (resolution["outcome"], resolution["by"], resolution["was"]) == ("done", "ops-oncall", "unknown")
    assert resolution["note"] == "the provider's log shows it sent" and resolution["at"]
    replay = run(stack, agent_id, trigger)
    result = tool_result(stack, replay["run_id"])
    assert result["deduplicated"] is True and "confirmed by ops-oncall" in result["output"]
    assert len(receiver.to("/send")) == 1  # the 502 attempt only: neither later run sent it
    assert [e["key"] for e in listed(stack, f"status=done&run_id={first['run_id']}")] == [entry["key"]]
    assert listed(stack, f"status=unknown&run_id={first['run_id']}") == []


def test_undone_lets_the_replay_perform_it_again(stack: LocalStack, receiver: Receiver) -> None:
    agent_id, trigger, _, entry = unknown_effect(stack, receiver)

    status, _, resolved = stack.invoke_api(
        "POST", f"/v1/effects/{entry['key']}/resolve", {"outcome": "undone", "note": "bounced"}
    )

    assert status == 200, resolved
    assert resolved["status"] == "undone"
    assert resolved["resolution"]["by"] == "sk-local…"  # a key without a name: its prefix
    replay = run(stack, agent_id, trigger)
    assert tool_result(stack, replay["run_id"])["output"] == {"message_id": "m-1"}
    assert len(receiver.to("/send")) == 2
    entry = effects.get(TENANT, ledger.ledger_key(entry["key"]))
    assert entry is not None and (entry.status, entry.generation) == ("done", 2)
    assert entry.history[-1]["undone_by"] == "sk-local…" and entry.history[-1]["note"] == "bounced"


def test_what_cannot_be_resolved_is_refused_with_stable_codes(stack: LocalStack, receiver: Receiver) -> None:
    _, _, _, entry = unknown_effect(stack, receiver)
    path = f"/v1/effects/{entry['key']}/resolve"

    other = stack.invoke_api("POST", path, {"outcome": "done"}, key=OTHER_KEY)
    unknown = stack.invoke_api("POST", f"/v1/effects/effect:{'0' * 64}/resolve", {"outcome": "done"})
    malformed = stack.invoke_api("POST", "/v1/effects/not-a-key/resolve", {"outcome": "done"})
    invalid = stack.invoke_api("POST", path, {"outcome": "maybe"})
    assert stack.invoke_api("POST", path, {"outcome": "done"})[0] == 200
    again = stack.invoke_api("POST", path, {"outcome": "done"})
    forged = stack.invoke_api("GET", "/v1/effects?next_token=bm90LW91cnM=")
    bad_status = stack.invoke_api("GET", "/v1/effects?status=maybe")

    assert (other[0], other[2]["error"]["code"]) == (404, "effect_not_found")
    assert (unknown[0], unknown[2]["error"]["code"]) == (404, "effect_not_found")
    assert (malformed[0], malformed[2]["error"]["code"]) == (404, "effect_not_found")
    assert invalid[0] == 422 and again[0] == 409 and again[2]["error"]["code"] == "effect_not_resolvable"
    assert (forged[0], forged[2]["error"]["code"]) == (400, "invalid_next_token")
    assert bad_status[0] == 422
    assert entry["key"] not in [e["key"] for e in listed(stack, "status=done", key=OTHER_KEY)]


def test_entries_page_and_expire_after_effects_ttl_days(stack: LocalStack, receiver: Receiver) -> None:
    _, _, first, entry = unknown_effect(stack, receiver)

    _, _, page = stack.invoke_api("GET", "/v1/effects?limit=1")
    assert len(page["effects"]) == 1 and page["next_token"]
    status, _, following = stack.invoke_api("GET", f"/v1/effects?limit=1&next_token={page['next_token']}")
    assert status == 200 and following["effects"][0]["key"] != page["effects"][0]["key"]
    item = EffectItem.get(TENANT, ledger.ledger_key(entry["key"]))
    assert item.expires_at is not None
    assert abs(item.expires_at - (utcnow() + timedelta(days=400))) < timedelta(minutes=5)
    assert [e["kind"] for e in listed(stack, f"run_id={first['run_id']}")] == ["effect"]
