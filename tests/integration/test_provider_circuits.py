"""Provider circuits (issue 24, section 4): a 429 storm opens the circuit of the key that is refused,
the rest of the queue parks instead of failing, and a probe through the sweep resumes them all."""

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from stepwise.core.ids import new_id
from stepwise.core.schema import utcnow
from stepwise.store import keys
from stepwise.usage import circuits
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.openai_server import FakeOpenAI
from tests.integration.support import wait_for_run
from tests.integration.test_model_path import fast_retries

MODEL = "openai/gpt-fake"
TENANT_KEY = "sk-tenant-storm-3333"


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    yield fake
    fake.close()


def _statuses(stack: LocalStack, key: str, run_ids: list[str]) -> list[str]:
    return [stack.invoke_api("GET", f"/v1/runs/{r}", key=key)[2]["status"] for r in run_ids]


def test_a_429_storm_opens_the_circuit_parks_the_queue_and_the_probe_resumes_it(
    stack: LocalStack, model: FakeOpenAI
) -> None:
    # A tenant with its own OpenAI key: the circuit is that key's, no other test's runs share it.
    tenant_id, key = new_id("ten"), f"sk-{new_id('key')}"
    keys.store_key(key, tenant_id)
    stack.invoke_api("PUT", "/v1/settings/providers.openai.api_key", {"value": TENANT_KEY}, key=key)
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "storm", "model": MODEL}, key=key)
    for _ in range(40):
        model.rate_limited()

    def start(message: str) -> str:
        _, _, accepted = stack.invoke_api(
            "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": message}, key=key
        )
        return str(accepted["run_id"])

    with stack.redefined(fast_retries):
        first = [start(f"early {i}") for i in range(5)]

        def opened() -> bool:
            assert circuits.is_open(circuits.circuit_for(tenant_id, "", "openai", "tenant"), fresh=True)
            return True

        eventually(opened, timeout=30, what="the circuit to open")
        asked = len(model.requests)
        rest = [start(f"late {i}") for i in range(15)]
        runs = first + rest

        def parked() -> bool:
            statuses = _statuses(stack, key, runs)
            assert statuses == ["waiting"] * 20, statuses
            return True

        eventually(parked, timeout=30, what="every run to park")
        # A synchronous run cannot wait: it answers 503 at once, without calling the provider.
        sync = stack.invoke_api(
            "POST", f"/v1/agents/{agent['agent_id']}/run", {"message": "late sync"}, key=key
        )
        # The storm: five refusals opened it (the first runs' retries may add a few while it
        # opens); the 15 runs started after it never called the provider.
        assert asked >= 5
        sent = [str(m["content"]) for body in model.bodies for m in body["messages"]]
        assert not [m for m in sent if m.startswith("late")]
        assert all(r.headers["authorization"] == f"Bearer {TENANT_KEY}" for r in model.requests)
        _, _, events = stack.invoke_api("GET", f"/v1/runs/{rest[0]}/events", key=key)
        paused = [e["data"] for e in events["events"] if e["type"] == "provider_paused"]
        assert paused and paused[0]["provider"] == "openai" and paused[0]["key_owner"] == "tenant"

        model.clear()  # the provider is back
        too_soon = circuits.sweep(circuits.probe_through_step)
        report = circuits.sweep(circuits.probe_through_step, now=utcnow() + timedelta(minutes=1))

        finished: list[dict[str, Any]] = [wait_for_run(stack, r, key=key) for r in runs]

    assert sync[0] == 503 and sync[2]["error"]["code"] == "rate_limited", sync
    assert too_soon.probed == 0  # open for less than PROBE_AFTER_SECONDS: not tried yet
    assert (report.probed, report.closed, report.resumed) == (1, 1, 20)
    assert [r["status"] for r in finished] == ["succeeded"] * 20
    assert not circuits.is_open(circuits.circuit_for(tenant_id, "", "openai", "tenant"), fresh=True)
