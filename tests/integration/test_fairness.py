"""Fairness between tenants (issue 30 §2): one tenant flooding the Step function with slow runs holds
at most its step share, so another tenant's runs still finish; the shares' DynamoDB item in moto."""

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise.core import config
from stepwise.core.tables import StepShareItem
from stepwise.store import keys, shares
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.support import wait_for_run
from tests.integration.test_model_path import fast_retries

MODEL = "openai/gpt-fake"
# Tenants of their own: no other test's run holds one of their shares.
A_KEY, A_TENANT = "sk-fair-flooding", "fair-flooding"
B_KEY, B_TENANT = "sk-fair-quick", "fair-quick"
SHARE = 2  # each tenant's concurrent model steps
RESERVED = 3  # the Step function's reserved concurrency: one more than a tenant's share
FLOOD = 5  # tenant A's slow runs


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    yield fake
    fake.close()


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("STEPWISE_STEP_SHARE", str(SHARE))
    config.reset()
    yield
    monkeypatch.undo()
    config.reset()


def used(tenant_id: str) -> int:
    try:
        return int(StepShareItem.get(tenant_id, shares.SHARES, consistent_read=True).used)
    except StepShareItem.DoesNotExist:
        return 0


def start(stack: LocalStack, key: str, message: str) -> str:
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "fair", "model": MODEL}, key=key)
    assert status == 201, created
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{created['agent_id']}/runs", {"message": message}, key=key
    )
    assert status == 202, accepted
    return str(accepted["run_id"])


def test_a_flooding_tenant_holds_its_share_and_the_other_tenant_finishes(
    stack: LocalStack, model: FakeOpenAI, shared: None
) -> None:
    keys.store_key(A_KEY, A_TENANT)
    keys.store_key(B_KEY, B_TENANT)
    released = threading.Event()

    def answer(body: dict[str, Any]) -> Reply:
        if "flood" in str(body["messages"]):  # tenant A's runs are slow until the test lets them go
            released.wait(timeout=90)
        return Reply(content="answered").usage(10, 2)

    for _ in range(FLOOD + 2):
        model.answer(answer)
    flooded = lambda: sum("flood" in str(b["messages"]) for b in model.bodies)  # noqa: E731

    with stack.redefined(fast_retries), stack.lambdas.reserved("StepFunction", RESERVED):
        a_runs = [start(stack, A_KEY, "flood") for _ in range(FLOOD)]
        eventually(lambda: flooded() == SHARE, what="tenant A's share to be taken by its slow steps")
        b_runs = [start(stack, B_KEY, "quick") for _ in range(2)]

        b_ended = [wait_for_run(stack, run_id, timeout=60, key=B_KEY) for run_id in b_runs]

        assert [r["status"] for r in b_ended] == ["succeeded", "succeeded"]
        # Meanwhile tenant A never had more than its share of steps in the model, and all of its runs
        # are still under way: two held in the model, three waiting their turn.
        assert flooded() == SHARE
        a_now = [stack.invoke_api("GET", f"/v1/runs/{run_id}", key=A_KEY)[2]["status"] for run_id in a_runs]
        assert all(status in ("queued", "running") for status in a_now), a_now
        released.set()
        a_ended = [wait_for_run(stack, run_id, timeout=90, key=A_KEY) for run_id in a_runs]

    assert [r["status"] for r in a_ended] == ["succeeded"] * FLOOD
    assert flooded() == FLOOD
    assert used(A_TENANT) == used(B_TENANT) == 0  # every share given back


def test_shares_are_bounded_reentrant_and_a_crashed_steps_lease_ends(stack: LocalStack) -> None:
    tenant = "fair-leases"
    assert shares.take(tenant, "run_1", limit=2, until=1_000, now=500)
    assert shares.take(tenant, "run_2", limit=2, until=1_000, now=500)
    assert not shares.take(tenant, "run_3", limit=2, until=1_000, now=500)  # the share is full
    assert shares.take(tenant, "run_1", limit=2, until=2_000, now=600)  # a retried step renews its own
    assert shares.take("fair-leases-other", "run_3", limit=2, until=1_000, now=500)  # tenants apart
    assert used(tenant) == 2
    # run_2's Step was killed and never gave its share back: once its lease ended, it is dropped.
    assert shares.take(tenant, "run_3", limit=2, until=3_000, now=1_500)
    assert used(tenant) == 2
    shares.give_back(tenant, "run_1")
    shares.give_back(tenant, "run_2")  # dropped already: nothing more is given back
    shares.give_back(tenant, "run_3")
    assert used(tenant) == 0
