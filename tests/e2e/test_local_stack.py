"""The local stack as a developer runs it (`python -m stepwise_local`), driven over real HTTP on loopback."""

from __future__ import annotations

from typing import Any

import httpx

from tests.eventually import eventually
from tests.fakes.receiver import Receiver


def create_agent(api: httpx.Client, **body: Any) -> str:
    response = api.post("/v1/agents", json={"name": "e2e", **body})
    assert response.status_code == 201, response.text
    return str(response.json()["agent_id"])


def start_run(api: httpx.Client, agent_id: str, **body: Any) -> dict[str, Any]:
    response = api.post(f"/v1/agents/{agent_id}/runs", json={"message": "hi", **body})
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["status"] == "queued" and accepted["run_id"] and accepted["session_id"]
    return dict(accepted)


def run_events(api: httpx.Client, run_id: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Every event of a run, read the way a client does: long-poll until the log says done."""
    events: list[dict[str, Any]] = []
    after = 0

    def done() -> bool:
        nonlocal after
        response = api.get(f"/v1/runs/{run_id}/events", params={"after": after, "wait": 10})
        assert response.status_code == 200, response.text
        page = response.json()
        events.extend(page["events"])
        after = page["next"]
        assert page["done"], f"events so far: {[e['type'] for e in events]}"
        return True

    eventually(done, timeout=timeout, what=f"run {run_id} to be done")
    return events


def finished_run(api: httpx.Client, run_id: str) -> dict[str, Any]:
    events = run_events(api, run_id)  # done in the log means the run record is final too
    assert events

    def probe() -> dict[str, Any] | None:
        response = api.get(f"/v1/runs/{run_id}")
        assert response.status_code == 200, response.text
        run = response.json()
        return dict(run) if run["status"] not in ("queued", "running") else None

    return eventually(probe, interval=0.1, what=f"run {run_id}'s final record")


def sse_ids(text: str) -> list[int]:
    return [int(line[len("id:") :].strip()) for line in text.splitlines() if line.startswith("id:")]


def test_health_is_open_and_everything_else_needs_a_valid_key(base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=10) as anonymous:
        health = anonymous.get("/v1/health")
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        assert anonymous.get("/v1/agents").status_code == 401
        wrong = anonymous.get("/v1/agents", headers={"Authorization": "Bearer sk-not-a-key"})
        assert wrong.status_code == 401


def test_the_demo_agent_answers_a_weather_question_with_its_tool(
    api: httpx.Client, demo_agent_id: str
) -> None:
    accepted = start_run(api, demo_agent_id, message="What is the weather in Paris?")

    events = run_events(api, accepted["run_id"])
    run = finished_run(api, accepted["run_id"])

    types = [e["type"] for e in events]
    for expected in ("run_started", "tool_call", "tool_result", "run_completed"):
        assert expected in types, types
    assert types[0] == "run_started" and types[-1] == "run_completed"
    calls = [e["data"] for e in events if e["type"] == "tool_call"]
    results = [e["data"] for e in events if e["type"] == "tool_result"]
    assert [c["tool_name"] for c in calls] == ["get_weather"]
    assert results[0]["tool_name"] == "get_weather" and "sky" in str(results[0]["output"])
    assert run["status"] == "succeeded", run
    assert run["tools_executed"] == ["get_weather"]
    assert run["output"]
    assert run["usage"]["input_tokens"] > 0 and run["usage"]["output_tokens"] > 0


def test_a_custom_http_tool_reaches_a_loopback_endpoint(api: httpx.Client, receiver: Receiver) -> None:
    agent_id = create_agent(
        api,
        tools=[
            {
                "type": "http",
                "name": "notify",
                "description": "d",
                "input_schema": {
                    "type": "object",
                    "properties": {"to": {"type": "string"}},
                    "required": ["to"],
                },
                "endpoint": f"{receiver.url}/notify",
            }
        ],
    )
    script = [{"tool_calls": [{"name": "notify", "arguments": {"to": "ops"}}]}, {"text": "sent"}]

    run = finished_run(api, start_run(api, agent_id, script=script)["run_id"])

    assert run["status"] == "succeeded", run
    assert run["output"] == "sent"
    calls = receiver.to("/notify")
    assert [(r.method, r.json()) for r in calls] == [("POST", {"to": "ops"})]


def test_sse_streams_a_finished_run_and_resumes_from_last_event_id(api: httpx.Client) -> None:
    run = finished_run(api, start_run(api, create_agent(api), message="stream me")["run_id"])
    path = f"/v1/runs/{run['run_id']}/stream"

    full = api.get(path)
    assert full.status_code == 200, full.text
    assert full.headers["content-type"].startswith("text/event-stream")
    ids = sse_ids(full.text)
    assert len(ids) >= 3 and ids == list(range(1, len(ids) + 1)), full.text
    assert "event: run_started" in full.text and "event: run_completed" in full.text

    resumed = api.get(path, headers={"Last-Event-ID": "2"})
    assert resumed.status_code == 200
    assert sse_ids(resumed.text) == list(range(3, len(ids) + 1))

    caught_up = api.get(path, headers={"Last-Event-ID": str(len(ids))})
    assert caught_up.status_code == 204


def test_another_tenant_sees_none_of_this_tenants_data(
    api: httpx.Client, other: httpx.Client, demo_agent_id: str
) -> None:
    run_id = start_run(api, demo_agent_id, message="What is the weather in Paris?")["run_id"]
    finished_run(api, run_id)

    assert other.get(f"/v1/agents/{demo_agent_id}").status_code == 404
    assert other.post(f"/v1/agents/{demo_agent_id}/runs", json={"message": "x"}).status_code == 404
    assert other.get(f"/v1/runs/{run_id}").status_code == 404
    assert other.get(f"/v1/runs/{run_id}/events").status_code == 404
    listed = other.get("/v1/agents")
    assert listed.status_code == 200 and listed.json()["agents"] == []


def test_a_sync_run_answers_in_the_response(api: httpx.Client) -> None:
    response = api.post(f"/v1/agents/{create_agent(api)}/run", json={"message": "ping"})

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["output"] == "You said: ping"
    assert body["run_id"] and body["session_id"]


def test_bad_input_is_rejected_over_http(api: httpx.Client) -> None:
    agent_id = create_agent(api)
    json_headers = {"Content-Type": "application/json"}

    malformed = api.post("/v1/agents", content=b'{"name": "x"', headers=json_headers)
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "malformed_json"

    huge = b'{"name": "' + b"x" * (1024 * 1024 + 1) + b'"}'
    assert api.post("/v1/agents", content=huge, headers=json_headers).status_code == 413
    # Starting a run takes up to 6 MB (inline attachments); past that it is a 413 that says to upload.
    huger = b'{"message": "' + b"x" * 6_000_001 + b'"}'
    too_big = api.post(f"/v1/agents/{agent_id}/runs", content=huger, headers=json_headers)
    assert too_big.status_code == 413 and "uploads" in too_big.json()["error"]["message"]

    missing = api.post(f"/v1/agents/{agent_id}/runs", json={})
    assert missing.status_code == 422 and missing.json()["error"]["code"] == "validation_error"
