"""Workflows on the local stack: each definition is compiled to ASL and moto's interpreter runs it; the
agents inside are ordinary runs of the scripted model (an agent without a script answers "You said:
<its message>", which lets a template's value be seen in an output)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.integration.support import OTHER_KEY, wait_for_run


def agent(stack: LocalStack, name: str, **body: Any) -> str:
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": name, **body})
    assert status == 201, created
    return str(created["agent_id"])


def text(words: str) -> list[dict[str, Any]]:
    return [{"text": words}]


def create(stack: LocalStack, root: dict[str, Any], **body: Any) -> dict[str, Any]:
    status, _, created = stack.invoke_api("POST", "/v1/workflows", {"name": "wf", "root": root, **body})
    assert status == 201, created
    return dict(created)


def run(stack: LocalStack, workflow_id: str, payload: dict[str, Any] | None = None, **body: Any) -> str:
    status, _, accepted = stack.invoke_api("POST", f"/v1/workflows/{workflow_id}/runs", {"input": payload or {}, **body})
    assert status == 202, accepted
    return str(accepted["run_id"])


def finished(stack: LocalStack, workflow_id: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    return wait_for_run(stack, run(stack, workflow_id, payload), timeout=60)


def log(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0")
    return list(page["events"])


def of_type(events: list[dict[str, Any]], etype: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == etype]


def child(stack: LocalStack, run_id: str) -> dict[str, Any]:
    status, _, found = stack.invoke_api("GET", f"/v1/runs/{run_id}")
    assert status == 200, found
    return dict(found)


def test_a_sequential_pipeline_passes_outputs_along(stack: LocalStack) -> None:
    researcher = agent(stack, "researcher", script=text("Facts: tides follow the moon."))
    echo = agent(stack, "echo")
    workflow = create(
        stack,
        {
            "id": "pipeline",
            "type": "sequential",
            "nodes": [
                {"id": "research", "type": "agent", "agent_id": researcher, "input": "Research {{input.topic}}"},
                {"id": "draft", "type": "agent", "agent_id": echo, "input": "Draft from: {{nodes.research.output}}"},
                {"id": "check", "type": "agent", "agent_id": echo, "input": "Check: {{nodes.draft.output}}"},
            ],
        },
        input_schema={"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]},
    )

    ended = finished(stack, workflow["workflow_id"], {"topic": "tides"})

    assert ended["status"] == "succeeded", ended
    assert ended["output"] == "You said: Check: You said: Draft from: Facts: tides follow the moon."
    assert ended["kind"] == "workflow" and ended["trigger"] == "workflow"
    assert ended["workflow_id"] == workflow["workflow_id"] and ended["workflow_version"] == 1
    assert len(ended["children"]) == 3
    first = child(stack, ended["children"][0])
    assert first["parent_run_id"] == ended["run_id"] and first["root_run_id"] == ended["run_id"]
    assert first["input"] == "Research tides" and first["trigger"] == "workflow"
    assert ended["total_usage"]["output_tokens"] > 0
    events = log(stack, ended["run_id"])
    assert [e["node_id"] for e in of_type(events, "node_completed")] == ["research", "draft", "check"]
    assert len(of_type(events, "node_started")) == 3

    status, _, refused = stack.invoke_api("POST", f"/v1/workflows/{workflow['workflow_id']}/runs", {"input": {}})
    assert status == 422 and refused["error"]["code"] == "input_invalid"
