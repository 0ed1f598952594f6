"""The kill switch (issue 24, section 3): bulk cancel, paused agents, suspended tenants."""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from stepwise.core.ids import new_id
from stepwise.runs import answers, bulk_cancel
from stepwise.schedules import triggers
from stepwise.store import keys
from stepwise.store import runs as run_store
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.integration.support import wait_for_run

CLIENT_TOOL = {
    "type": "client",
    "name": "ask_app",
    "description": "the app answers",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}
# The run asks the app and waits for its answer: it stays active until answered or cancelled.
WAITS = [{"tool_calls": [{"name": "ask_app", "arguments": {"q": "?"}}]}, {"text": "done"}]


@pytest.fixture
def tenant(stack: LocalStack) -> Iterator[tuple[str, str]]:
    """A tenant of its own: a bulk cancel or a suspension touches no other test's runs."""
    tenant_id, key = new_id("ten"), f"sk-{new_id('key')}"
    keys.store_key(key, tenant_id)
    yield tenant_id, key


def _agent(stack: LocalStack, key: str) -> str:
    status, _, body = stack.invoke_api(
        "POST", "/v1/agents", {"name": "k", "tools": [CLIENT_TOOL], "script": WAITS}, key=key
    )
    assert status == 201, body
    return str(body["agent_id"])


def _start(stack: LocalStack, key: str, agent_id: str, **extra: Any) -> tuple[int, Any]:
    body = {"message": "hi", **extra}
    status, _, answer = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", body, key=key)
    return status, answer


def _waiting(stack: LocalStack, key: str, run_id: str) -> dict[str, Any]:
    def probe() -> dict[str, Any]:
        _, _, run = stack.invoke_api("GET", f"/v1/runs/{run_id}", key=key)
        assert run["status"] == "waiting", run
        return dict(run)

    return eventually(probe, timeout=30, what=f"{run_id} to wait")


def _statuses(stack: LocalStack, key: str, agent_id: str) -> list[str]:
    _, _, page = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}&limit=100", key=key)
    return [r["status"] for r in page["runs"]]


def test_bulk_cancel_of_30_runs_pages_past_one_request(
    stack: LocalStack, tenant: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, key = tenant
    target, spared = _agent(stack, key), _agent(stack, key)
    status, first = _start(stack, key, target)
    assert status == 202, first
    # 29 more behind it on its session (queued), so 30 active runs cost one execution; the first may
    # still be in its first step when the kill switch comes: a cancel stops it wherever it is.
    for _ in range(29):
        assert _start(stack, key, target, session_id=first["session_id"])[0] == 202
    kept = _start(stack, key, spared)[1]["run_id"]
    # One request may cancel 10 here: the other 20 go on in the reconciler, invoked asynchronously.
    monkeypatch.setattr(bulk_cancel, "MAX_PER_REQUEST", 10)

    status, _, body = stack.invoke_api("POST", "/v1/runs:cancel", {"agent_id": target}, key=key)

    assert status == 200, body
    assert body == {"cancelled": 10, "continuing": True}

    def all_cancelled() -> bool:
        statuses = _statuses(stack, key, target)
        assert statuses == ["cancelled"] * 30, statuses
        return True

    eventually(all_cancelled, timeout=30, what="the rest of the bulk cancel")
    _, _, other = stack.invoke_api("GET", f"/v1/runs/{kept}", key=key)
    assert other["status"] in ("queued", "running", "waiting")  # another agent's run: not matched
    # Nothing left: a second kill switch cancels nothing and says so.
    again = stack.invoke_api("POST", "/v1/runs:cancel", {"agent_id": target}, key=key)
    assert again[2] == {"cancelled": 0, "continuing": False}


def test_bulk_cancel_filters_and_refuses_a_final_status(stack: LocalStack, tenant: tuple[str, str]) -> None:
    _, key = tenant
    agent_id = _agent(stack, key)
    alice = _start(stack, key, agent_id, user_id="alice")[1]["run_id"]
    bob = _start(stack, key, agent_id, user_id="bob")[1]["run_id"]
    _waiting(stack, key, alice)
    _waiting(stack, key, bob)

    bad = stack.invoke_api("POST", "/v1/runs:cancel", {"status": "succeeded"}, key=key)
    early = stack.invoke_api("POST", "/v1/runs:cancel", {"created_before": "2020-01-01T00:00:00Z"}, key=key)
    status, _, body = stack.invoke_api(
        "POST", "/v1/runs:cancel", {"user_id": "alice", "status": "waiting"}, key=key
    )

    assert bad[0] == 422 and bad[2]["error"]["code"] == "validation_error", bad
    assert early[2] == {"cancelled": 0, "continuing": False}
    assert (status, body) == (200, {"cancelled": 1, "continuing": False})
    assert wait_for_run(stack, alice, key=key)["error"]["code"] == "cancelled"
    _, _, still = stack.invoke_api("GET", f"/v1/runs/{bob}", key=key)
    assert still["status"] == "waiting"
    stack.invoke_api("POST", "/v1/runs:cancel", {}, key=key)  # leaves the tenant's quota as it was


def test_a_paused_agent_refuses_new_runs_and_skips_deliveries(
    stack: LocalStack, tenant: tuple[str, str]
) -> None:
    tenant_id, key = tenant
    agent_id = _agent(stack, key)
    running = _start(stack, key, agent_id)[1]
    _waiting(stack, key, running["run_id"])

    patched = stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", {"paused": True}, key=key)
    started = _start(stack, key, agent_id)
    sync = stack.invoke_api("POST", f"/v1/agents/{agent_id}/run", {"message": "hi"}, key=key)
    event = {
        "tenant_id": tenant_id,
        "agent_id": agent_id,
        "id": new_id("evt"),
        "detail-type": "ping",
        "source": "test",
        "time": datetime.now(UTC).isoformat(),
        "detail": {},
    }
    delivered = triggers.deliver(event)
    cleared = stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", {"paused": None}, key=key)

    assert patched[0] == 200 and patched[2]["paused"] is True, patched
    assert started[0] == 409 and started[1]["error"]["code"] == "agent_paused", started
    assert sync[0] == 409 and sync[2]["error"]["code"] == "agent_paused", sync
    assert delivered.status == "skipped"
    assert cleared[0] == 422
    _, _, agent = stack.invoke_api("GET", f"/v1/agents/{agent_id}", key=key)
    assert agent["skipped_while_paused"] == 1
    _, _, active = stack.invoke_api("GET", f"/v1/runs/{running['run_id']}", key=key)
    assert active["status"] == "waiting"  # runs in flight go on

    unpaused = stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", {"paused": False}, key=key)
    assert unpaused[2]["paused"] is False
    assert _start(stack, key, agent_id)[0] == 202
    stack.invoke_api("POST", "/v1/runs:cancel", {}, key=key)


def test_a_suspended_tenant_is_refused_and_its_run_stops_at_its_next_step(
    stack: LocalStack, tenant: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant_id, key = tenant
    agent_id = _agent(stack, key)
    run = _start(stack, key, agent_id)[1]
    _waiting(stack, key, run["run_id"])
    _, _, pending = stack.invoke_api(
        "GET", f"/v1/sessions/{run['session_id']}/interactions?status=pending", key=key
    )
    waited = pending["interactions"][0]
    monkeypatch.setenv("STEPWISE_SUSPENDED_TENANTS", f"ten_someone_else, {tenant_id}")

    refused = stack.invoke_api("GET", "/v1/agents", key=key)
    other = stack.invoke_api("GET", "/v1/agents")  # the local tenant is not suspended
    # The app's answer cannot come through the API now; delivered behind it, the run takes its next
    # step, which stops it.
    answer = {"tool_call_id": waited["tool_call_id"], "outcome": "completed", "output": "ok"}
    answers.respond(tenant_id, waited["interaction_id"], answer, key=None)

    def stopped() -> Any:
        current = run_store.get(tenant_id, run["run_id"])  # the API would refuse to show it
        assert current.status == "failed", current.status
        return current

    final = eventually(stopped, timeout=30, what="the suspended tenant's run to stop")
    assert refused[0] == 403 and refused[2]["error"]["code"] == "tenant_suspended", refused
    assert other[0] == 200
    assert final.error is not None and final.error.code == "tenant_suspended"
