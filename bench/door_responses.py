"""What the OpenAI Responses door adds to a run: the same scripted run (one tool call, then the answer)
started and followed as a client would, once through `POST /v1/agents/{id}/runs` plus the events
long-poll until the log is done, and once through `POST /v1/responses` (blocking, then streaming).

Counted locally with bench/meter.py: every DynamoDB request of every function (the run's own steps
included, which are the same on both sides) and every Lambda invocation, from the first request to the
end of the run's execution. "Extra" is the door's count less the native one (the median of ROUNDS each).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from typing import Any

from bench.harness import Section, local, lookup_tool
from bench.meter import Recorder

SCRIPT = [{"tool_calls": [{"name": "lookup", "arguments": {"q": "bench"}}]}, {"text": "done"}]
ROUNDS = 3
CLIENT_FUNCTIONS = ("ApiFunction", "EventsFunction", "AuthorizerFunction")


def _native(stack: Any, agent_id: str) -> str:
    status, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "bench"})
    assert status == 202, accepted
    after = 0
    while True:  # as a client follows a run: long-polls until the log is done
        _, _, page = stack.invoke_api("GET", f"/v1/runs/{accepted['run_id']}/events?after={after}&wait=20")
        after = page["next"]
        if page["done"]:
            return str(accepted["run_id"])


def _door(stream: bool) -> Callable[[Any, str], str]:
    def go(stack: Any, agent_id: str) -> str:
        body = {"model": f"agent:{agent_id}", "input": "bench", "stream": stream}
        status, _, answer = stack.invoke_api("POST", "/v1/responses", body)
        assert status == 200, answer
        if stream:
            assert "response.completed" in answer, answer
            return str(answer.split('"id": "', 1)[1].split('"', 1)[0])
        assert answer["status"] == "completed", answer
        return str(answer["id"])

    return go


def _measure(
    env: Any, recorder: Recorder, label: str, go: Callable[[Any, str], str], agent_id: str
) -> dict[str, Any]:
    requests, invocations = len(recorder.requests), len(recorder.invocations)
    with recorder.charging(label):
        run_id = go(env.stack, agent_id)
    env.wait_execution(run_id)  # the run's last requests are in
    made = recorder.requests[requests:]
    called = recorder.invocations[invocations:]
    polls = sum(1 for r in made if r.operation == "GetItem" and any("RunEvents" in t for t in r.tables))
    return {
        "requests": len(made),
        # The log's head is read every 0.25 s while a reader waits, on both sides: how many times
        # depends on timing, not on the door, so the figures are also given without them.
        "fixed": len(made) - polls,
        "client_requests": sum(1 for r in made if r.function in (label, *CLIENT_FUNCTIONS)),
        "invocations": len(called),
        "client_invocations": sum(1 for i in called if i.function in CLIENT_FUNCTIONS),
        "by_function": dict(Counter(i.function for i in called)),
        "operations": dict(
            Counter(
                f"{r.function} {r.operation} {','.join(r.tables)}"
                for r in made
                if r.function in (label, *CLIENT_FUNCTIONS)
            )
        ),
    }


def run() -> Section:
    section = Section("OpenAI Responses door: what it adds to a run (local counts)")
    env = local()
    agent_id = env.create_agent(
        {"name": "bench-responses", "tools": [lookup_tool(env.tool.url)], "script": SCRIPT}
    )
    recorder = Recorder(env)
    ways: dict[str, Callable[[Any, str], str]] = {
        "native": _native,
        "door, blocking": _door(stream=False),
        "door, streaming": _door(stream=True),
    }
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in ways}
    with recorder.installed():
        _measure(env, recorder, "warm-up", _native, agent_id)  # the first run imports what the rest reuse
        for _ in range(ROUNDS):
            for name, go in ways.items():
                found[name].append(_measure(env, recorder, name, go, agent_id))

    def median(name: str, key: str) -> float:
        return float(statistics.median(m[key] for m in found[name]))

    native_requests, native_invocations = median("native", "requests"), median("native", "invocations")
    for name in ways:
        requests, invocations = median(name, "requests"), median(name, "invocations")
        section.add(
            f"{name}: DynamoDB requests per run",
            requests,
            "requests",
            f"of which the client's requests: {median(name, 'client_requests'):g}",
            digits=0,
        )
        section.add(
            f"{name}: Lambda invocations per run",
            invocations,
            "invocations",
            f"client-facing: {median(name, 'client_invocations'):g}",
            digits=0,
        )
        if name != "native":
            section.add(
                f"{name}: extra DynamoDB requests",
                requests - native_requests,
                "requests",
                "goal ≤ 2",
                digits=0,
            )
            section.add(
                f"{name}: extra DynamoDB requests, head polls left out",
                median(name, "fixed") - median("native", "fixed"),
                "requests",
                "the same without the log head's timing-dependent polls",
                digits=0,
            )
            section.add(
                f"{name}: extra Lambda invocations",
                invocations - native_invocations,
                "invocations",
                "goal 0 while a client waits on a stream",
                digits=0,
            )
    section.details = found
    section.notes.append(
        "native = POST /v1/agents/{id}/runs then GET /v1/runs/{id}/events?wait=20 until done; the door "
        "answers the whole run in one request to the events function"
    )
    return section
