"""Concurrent API requests through the local gateway: each gets its own answer.

The gateway serves every request on its own thread, and the API function's Powertools resolver keeps the
request it is resolving in module state (`app.current_event`, the routers' context): in Lambda one
execution environment serves one request at a time, so that is safe there, and the local stack must
give each invocation the same guarantee or two requests read each other's tenant, path and body."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from stepwise_local.stack import DEFAULT_KEY, LocalStack
from tests.integration.support import OTHER_KEY

THREADS = 12
ROUNDS = 6


def test_concurrent_requests_from_two_tenants_each_see_only_their_own(stack: LocalStack) -> None:
    keys = [DEFAULT_KEY, OTHER_KEY]
    agents: list[tuple[str, str, str]] = []  # (key, agent_id, name)
    for index in range(THREADS):
        key = keys[index % 2]
        name = f"concurrent-{index}"
        status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": name}, key=key)
        assert status == 201, agent
        agents.append((key, agent["agent_id"], name))

    def read_own(slot: int) -> list[tuple[int, Any]]:
        key, agent_id, name = agents[slot]
        answers = []
        for round_ in range(ROUNDS):
            # A read of its own agent and a write that names it: mixed routes, bodies and tenants.
            answers.append(stack.invoke_api("GET", f"/v1/agents/{agent_id}", key=key)[::2])
            body = {"system_prompt": f"{name} round {round_}"}
            answers.append(stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", body, key=key)[::2])
        return answers

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(read_own, range(THREADS)))

    for (_, agent_id, name), answers in zip(agents, results, strict=True):
        for status, body in answers:
            assert status == 200, (name, body)
            assert (body["agent_id"], body["name"]) == (agent_id, name)
        last = answers[-1][1]
        assert last["system_prompt"] == f"{name} round {ROUNDS - 1}"
