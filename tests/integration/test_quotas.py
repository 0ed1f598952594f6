"""Per-tenant quotas: active runs and schedules, 429 `quota_exceeded` with Retry-After, counted on a
counter item moved in the same transaction as what it counts (so concurrent starts cannot overshoot
and an ending always gives its slot back)."""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from stepwise.core import config, quotas
from stepwise.core.ids import new_id
from stepwise.store import keys
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
    """A tenant of its own, so other tests' runs do not count against its quota."""
    tenant_id, key = new_id("ten"), f"sk-{new_id('key')}"
    keys.store_key(key, tenant_id)
    yield tenant_id, key


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("STEPWISE_MAX_ACTIVE_RUNS", "2")
    monkeypatch.setenv("STEPWISE_MAX_SCHEDULES", "1")
    config.reset()
    yield
    monkeypatch.undo()
    config.reset()


def agent(stack: LocalStack, key: str) -> str:
    status, _, body = stack.invoke_api(
        "POST", "/v1/agents", {"name": "q", "tools": [CLIENT_TOOL], "script": WAITS}, key=key
    )
    assert status == 201, body
    return str(body["agent_id"])


def start(stack: LocalStack, key: str, agent_id: str, **extra: Any) -> tuple[int, dict[str, str], Any]:
    return stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "hi", **extra}, key=key)


def wait_until_waiting(stack: LocalStack, key: str, run_id: str) -> None:
    def waiting() -> bool:
        _, _, run = stack.invoke_api("GET", f"/v1/runs/{run_id}", key=key)
        if run["status"] not in ("queued", "running", "waiting"):
            pytest.fail(f"the run ended instead: {run}")  # no use waiting on
        assert run["status"] == "waiting", run
        return True

    eventually(waiting, timeout=30, what=f"{run_id} to wait")


def test_one_active_run_past_the_limit_is_429_and_records_nothing(
    stack: LocalStack, tenant: tuple[str, str], limits: None
) -> None:
    tenant_id, key = tenant
    agent_id = agent(stack, key)
    first = start(stack, key, agent_id)
    assert first[0] == 202, first
    wait_until_waiting(stack, key, first[2]["run_id"])
    # Queued behind the first on its session: queued runs are active and count too.
    second = start(stack, key, agent_id, session_id=first[2]["session_id"])
    assert second[0] == 202 and second[2]["status"] == "queued", second

    status, headers, body = start(stack, key, agent_id)

    assert status == 429, body
    assert body["error"]["code"] == "quota_exceeded"
    assert body["error"]["details"] == {"quota": "active_runs", "limit": 2}
    assert headers["retry-after"] == "30"
    _, _, listed = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}", key=key)
    assert len(listed["runs"]) == 2  # the refused start left no run behind
    assert quotas.used(tenant_id, quotas.ACTIVE_RUNS) == 2


def test_a_run_that_ends_gives_its_slot_back(
    stack: LocalStack, tenant: tuple[str, str], limits: None
) -> None:
    tenant_id, key = tenant
    agent_id = agent(stack, key)
    runs = [start(stack, key, agent_id)[2]["run_id"] for _ in range(2)]
    assert start(stack, key, agent_id)[0] == 429

    cancelled = stack.invoke_api("POST", f"/v1/runs/{runs[0]}/cancel", {}, key=key)
    assert cancelled[0] in (200, 202), cancelled
    assert wait_for_run(stack, runs[0], key=key)["status"] == "cancelled"

    assert quotas.used(tenant_id, quotas.ACTIVE_RUNS) == 1
    again = start(stack, key, agent_id)
    assert again[0] == 202, again
    # A second cancel of the ended run must not give the slot back twice.
    stack.invoke_api("POST", f"/v1/runs/{runs[0]}/cancel", {}, key=key)
    assert quotas.used(tenant_id, quotas.ACTIVE_RUNS) == 2


def test_a_refused_start_gives_its_slot_back(
    stack: LocalStack, tenant: tuple[str, str], limits: None
) -> None:
    tenant_id, key = tenant
    agent_id = agent(stack, key)
    first = start(stack, key, agent_id)[2]
    wait_until_waiting(stack, key, first["run_id"])

    busy = start(stack, key, agent_id, session_id=first["session_id"], multitask_strategy="reject")

    assert busy[0] == 409 and busy[2]["error"]["code"] == "session_busy", busy
    assert quotas.used(tenant_id, quotas.ACTIVE_RUNS) == 1


def test_concurrent_starts_cannot_overshoot_the_limit(
    stack: LocalStack, tenant: tuple[str, str], limits: None
) -> None:
    tenant_id, key = tenant
    agent_id = agent(stack, key)

    with ThreadPoolExecutor(max_workers=6) as pool:
        statuses = sorted(s for s, _, _ in pool.map(lambda _: start(stack, key, agent_id), range(6)))

    assert statuses == [202, 202, 429, 429, 429, 429]
    assert quotas.used(tenant_id, quotas.ACTIVE_RUNS) == 2


def test_schedules_past_the_limit_are_429_until_one_is_deleted(
    stack: LocalStack, tenant: tuple[str, str], limits: None
) -> None:
    tenant_id, key = tenant
    agent_id = agent(stack, key)
    body = {"expression": "rate(1 hour)", "message": "tick"}
    status, _, first = stack.invoke_api("POST", f"/v1/agents/{agent_id}/schedules", body, key=key)
    assert status == 201, first

    status, headers, refused = stack.invoke_api("POST", f"/v1/agents/{agent_id}/schedules", body, key=key)

    assert status == 429 and refused["error"]["code"] == "quota_exceeded", refused
    assert refused["error"]["details"] == {"quota": "schedules", "limit": 1}
    assert int(headers["retry-after"]) > 0
    path = f"/v1/agents/{agent_id}/schedules/{first['schedule_id']}"
    assert stack.invoke_api("DELETE", path, key=key)[0] == 204
    assert stack.invoke_api("DELETE", path, key=key)[0] == 404  # gone: nothing given back twice
    assert quotas.used(tenant_id, quotas.SCHEDULES) == 0
    status, _, _ = stack.invoke_api("POST", f"/v1/agents/{agent_id}/schedules", body, key=key)
    assert status == 201
    assert quotas.used(tenant_id, quotas.SCHEDULES) == 1


def test_a_schedules_twin_sends_what_it_cannot_deliver_to_the_dead_letter_queue(
    stack: LocalStack, tenant: tuple[str, str]
) -> None:
    import boto3

    _, key = tenant
    agent_id = agent(stack, key)
    body = {"expression": "rate(1 hour)", "message": "tick"}
    status, _, created = stack.invoke_api("POST", f"/v1/agents/{agent_id}/schedules", body, key=key)
    assert status == 201, created

    twin = boto3.client("scheduler").get_schedule(
        Name=created["schedule_id"], GroupName=config.scheduling().group
    )

    assert twin["Target"]["DeadLetterConfig"]["Arn"] == stack.resolver.arns["DeadLetterQueue"]
