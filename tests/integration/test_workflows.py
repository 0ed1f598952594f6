"""Workflows on the local stack: each definition is compiled to ASL and moto's interpreter runs it; the
agents inside are ordinary runs of the scripted model (an agent without a script answers "You said:
<its message>", which lets a template's value be seen in an output)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stepwise.core import tracing
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.integration.support import OTHER_KEY, wait_for_run


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    tracing.use(SimpleSpanProcessor(memory))
    yield memory
    tracing.reset()


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
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/workflows/{workflow_id}/runs", {"input": payload or {}, **body}
    )
    assert status == 202, accepted
    return str(accepted["run_id"])


def finished(stack: LocalStack, workflow_id: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    return wait_for_run(stack, run(stack, workflow_id, payload), timeout=120)


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
                {
                    "id": "research",
                    "type": "agent",
                    "agent_id": researcher,
                    "input": "Research {{input.topic}}",
                },
                {
                    "id": "draft",
                    "type": "agent",
                    "agent_id": echo,
                    "input": "Draft from: {{nodes.research.output}}",
                },
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

    status, _, refused = stack.invoke_api(
        "POST", f"/v1/workflows/{workflow['workflow_id']}/runs", {"input": {}}
    )
    assert status == 422 and refused["error"]["code"] == "input_invalid"


WAITER_TOOL = {
    "type": "client",
    "name": "wait_here",
    "description": "The app answers when it likes",
    "input_schema": {"type": "object", "properties": {}},
}
WAIT = [{"tool_calls": [{"name": "wait_here", "arguments": {}}]}, {"text": "answered"}]


def waiter(stack: LocalStack, name: str = "waiter") -> str:
    """An agent whose runs wait on a client tool until the test answers (or the node times out)."""
    return agent(stack, name, tools=[WAITER_TOOL], script=WAIT)


def children_waiting(stack: LocalStack, run_id: str, count: int) -> list[dict[str, Any]]:
    """The workflow run's children once `count` of them wait on their client tool at once."""

    def waiting() -> list[dict[str, Any]]:
        found = [child(stack, c) for c in child(stack, run_id).get("children", [])]
        found = found or [child(stack, c) for c in _started(stack, run_id)]
        ready = [c for c in found if c["status"] == "waiting"]
        assert len(ready) == count, [c["status"] for c in found]
        return ready

    return eventually(waiting, timeout=60, what=f"{count} node runs waiting")


def _started(stack: LocalStack, run_id: str) -> list[str]:
    return [d["child_run_id"] for d in of_type(log(stack, run_id), "node_started") if "child_run_id" in d]


def answer(stack: LocalStack, run: dict[str, Any]) -> None:
    _, _, listed = stack.invoke_api("GET", f"/v1/sessions/{run['session_id']}/interactions?status=pending")
    (interaction,) = listed["interactions"]
    body = {"answer": {"tool_call_id": interaction["tool_call_id"], "outcome": "completed", "output": "ok"}}
    status, _, _ = stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{interaction['interaction_id']}/respond",
        body,
        headers={"Idempotency-Key": interaction["interaction_id"]},
    )
    assert status == 202


def test_a_parallel_of_three_agents_runs_them_at_once(stack: LocalStack) -> None:
    slow = waiter(stack)
    branches = [{"id": f"b{i}", "type": "agent", "agent_id": slow, "input": f"part {i}"} for i in range(3)]
    workflow = create(stack, {"id": "all", "type": "parallel", "branches": branches})
    run_id = run(stack, workflow["workflow_id"])

    # All three wait at the same moment: none waited for another to end (wall time < the sum).
    for waiting in children_waiting(stack, run_id, 3):
        answer(stack, waiting)
    ended = wait_for_run(stack, run_id)

    assert ended["status"] == "succeeded", ended
    assert json.loads(ended["output"]) == ["answered", "answered", "answered"]


def test_a_map_over_five_items_from_a_structured_output(stack: LocalStack) -> None:
    lister = agent(stack, "lister", script=text('{"items": ["a", "b", "c", "d", "e"]}'))
    echo = agent(stack, "echo")
    schema = {"type": "object", "properties": {"items": {"type": "array"}}, "required": ["items"]}
    workflow = create(
        stack,
        {
            "id": "flow",
            "type": "sequential",
            "nodes": [
                {
                    "id": "list",
                    "type": "agent",
                    "agent_id": lister,
                    "input": "List five",
                    "output_schema": schema,
                },
                {
                    "id": "each",
                    "type": "map",
                    "over": "nodes.list.output.items",
                    "max_concurrency": 5,
                    "node": {"id": "score", "type": "agent", "agent_id": echo, "input": "score {{item}}"},
                },
            ],
        },
    )

    ended = finished(stack, workflow["workflow_id"])

    assert ended["status"] == "succeeded", ended
    assert json.loads(ended["output"]) == [f"You said: score {x}" for x in "abcde"]
    done = of_type(log(stack, ended["run_id"]), "node_completed")
    assert sorted(d["index"] for d in done if d["node_id"] == "score") == [0, 1, 2, 3, 4]


def _writer_critic(stack: LocalStack, until: dict[str, Any], max_iterations: int) -> dict[str, Any]:
    echo = agent(stack, "echo")
    # The writer revises from the critic's last word; the critic approves (its output says "approved
    # approved") once a draft carries an earlier approval: on the second iteration.
    body = {
        "id": "write_until_approved",
        "type": "loop",
        "max_iterations": max_iterations,
        "until": until,
        "node": {
            "id": "round",
            "type": "sequential",
            "nodes": [
                {
                    "id": "writer",
                    "type": "agent",
                    "agent_id": echo,
                    "input": "{{nodes.critic.output}} approved",
                },
                {"id": "critic", "type": "agent", "agent_id": echo, "input": "{{nodes.writer.output}}"},
            ],
        },
    }
    return finished(stack, create(stack, body)["workflow_id"])


def test_a_writer_critic_loop_ends_when_the_critic_approves(stack: LocalStack) -> None:
    ended = _writer_critic(stack, {"path": "nodes.critic.output", "matches": "*approved approved*"}, 5)

    assert ended["status"] == "succeeded", ended
    critic = [d for d in of_type(log(stack, ended["run_id"]), "node_completed") if d["node_id"] == "critic"]
    assert [d["iteration"] for d in critic] == [1, 2]
    assert "approved approved" in ended["output"]


def test_a_loop_ends_at_max_iterations(stack: LocalStack) -> None:
    ended = _writer_critic(stack, {"path": "nodes.critic.output", "equals": "never"}, 2)

    assert ended["status"] == "succeeded", ended
    critic = [d for d in of_type(log(stack, ended["run_id"]), "node_completed") if d["node_id"] == "critic"]
    assert len(critic) == 2


def test_a_branch_on_a_structured_field(stack: LocalStack) -> None:
    classify = agent(stack, "classify", script=text('{"kind": "refund", "urgent": true}'))
    echo = agent(stack, "echo")
    schema = {
        "type": "object",
        "properties": {"kind": {"enum": ["refund", "question"]}},
        "required": ["kind"],
    }
    workflow = create(
        stack,
        {
            "id": "triage",
            "type": "sequential",
            "nodes": [
                {
                    "id": "classify",
                    "type": "agent",
                    "agent_id": classify,
                    "input": "{{input.ticket}}",
                    "output_schema": schema,
                },
                {
                    "id": "route",
                    "type": "branch",
                    "on": "nodes.classify.output.kind",
                    "cases": {
                        "refund": {
                            "id": "refund",
                            "type": "agent",
                            "agent_id": echo,
                            "input": "refund {{input.ticket}}",
                        },
                        "question": {"id": "question", "type": "agent", "agent_id": echo, "input": "answer"},
                    },
                    "default": {"id": "other", "type": "agent", "agent_id": echo, "input": "other"},
                },
            ],
        },
    )

    ended = finished(stack, workflow["workflow_id"], {"ticket": "T-1"})

    assert ended["status"] == "succeeded", ended
    assert ended["output"] == "You said: refund T-1"
    ran = {d["node_id"] for d in of_type(log(stack, ended["run_id"]), "node_completed")}
    assert ran == {"classify", "refund"}


def _gated(stack: LocalStack) -> tuple[str, dict[str, Any]]:
    echo = agent(stack, "echo")
    workflow = create(
        stack,
        {
            "id": "gated",
            "type": "sequential",
            "nodes": [
                {"id": "draft", "type": "agent", "agent_id": echo, "input": "draft {{input.x}}"},
                {"id": "review", "type": "approval", "prompt": "Send this? {{nodes.draft.output}}"},
                {"id": "send", "type": "agent", "agent_id": echo, "input": "send {{nodes.draft.output}}"},
            ],
        },
    )
    run_id = run(stack, workflow["workflow_id"], {"x": "memo"})

    def requested() -> dict[str, Any]:
        found = of_type(log(stack, run_id), "approval_requested")
        assert len(found) == 1 and child(stack, run_id)["status"] == "waiting", found
        return found[0]

    return run_id, eventually(requested, timeout=120, what="the approval to be requested")


def test_an_approval_gate_approved_by_link(stack: LocalStack) -> None:
    from urllib.parse import urlparse

    run_id, approval = _gated(stack)
    assert approval["arguments"] == {"prompt": "Send this? You said: draft memo"}
    path = urlparse(approval["approval_url"]).path
    status, _, page = stack.invoke_api("GET", path, key=None)
    assert status == 200 and "Send this?" in page

    status, _, page = stack.invoke_api(
        "POST",
        path,
        raw=b"decision=approve",
        key=None,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )

    assert status == 200
    ended = wait_for_run(stack, run_id)
    assert ended["status"] == "succeeded" and ended["output"] == "You said: send You said: draft memo"


def test_an_approval_gate_rejected(stack: LocalStack) -> None:
    run_id, approval = _gated(stack)

    status, _, _ = stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{approval['interaction_id']}/respond",
        {"answer": {"approved": False, "reason": "not now"}},
        headers={"Idempotency-Key": "reject-1"},
    )

    assert status == 202
    ended = wait_for_run(stack, run_id)
    assert ended["status"] == "failed" and ended["error"]["code"] == "rejected", ended
    assert len(ended["children"]) == 1  # `send` never ran
    (failed,) = of_type(log(stack, run_id), "node_failed")
    assert failed["node_id"] == "review"


def test_a_node_that_fails_with_on_error_continue(stack: LocalStack) -> None:
    # The answer never validates: one repair turn, then output_invalid; the workflow goes on.
    stubborn = agent(stack, "stubborn", script=text("not json at all"))
    echo = agent(stack, "echo")
    workflow = create(
        stack,
        {
            "id": "flow",
            "type": "sequential",
            "nodes": [
                {
                    "id": "bad",
                    "type": "agent",
                    "agent_id": stubborn,
                    "input": "json please",
                    "output_schema": {"type": "object"},
                    "on_error": "continue",
                },
                {"id": "after", "type": "agent", "agent_id": echo, "input": "[{{nodes.bad.output}}] goes on"},
            ],
        },
    )

    ended = finished(stack, workflow["workflow_id"])

    assert ended["status"] == "succeeded", ended
    assert ended["output"] == "You said: [] goes on"
    (failed,) = of_type(log(stack, ended["run_id"]), "node_failed")
    assert failed["node_id"] == "bad" and failed["error"]["code"] == "output_invalid"
    assert len(ended["children"]) == 3  # the answer, its repair turn, and `after`


def test_a_node_timeout_fails_the_workflow_and_ends_its_run(stack: LocalStack) -> None:
    slow = waiter(stack)
    workflow = create(
        stack, {"id": "slow", "type": "agent", "agent_id": slow, "input": "go", "timeout_seconds": 1}
    )

    ended = finished(stack, workflow["workflow_id"])

    assert ended["status"] == "failed" and ended["error"]["code"] == "timed_out", ended
    (node_run,) = ended["children"]
    assert eventually(
        lambda: child(stack, node_run)["status"] == "timed_out" or None,
        timeout=30,
        what="the node run to end",
    )


def test_cancelling_mid_map_cancels_every_child(stack: LocalStack) -> None:
    slow = waiter(stack)
    workflow = create(
        stack,
        {
            "id": "each",
            "type": "map",
            "over": "input.items",
            "node": {"id": "work", "type": "agent", "agent_id": slow, "input": "{{item}}"},
        },
    )
    run_id = run(stack, workflow["workflow_id"], {"items": [1, 2, 3, 4, 5]})
    waiting = children_waiting(stack, run_id, 5)

    status, _, cancelled = stack.invoke_api("POST", f"/v1/runs/{run_id}/cancel")

    assert status == 200 and cancelled["status"] == "cancelled", cancelled
    for node_run in waiting:
        assert child(stack, node_run["run_id"])["status"] == "cancelled"


def test_a_replay_skips_the_nodes_that_succeeded(stack: LocalStack) -> None:
    first = agent(stack, "first", script=text("step one done"))
    flaky = agent(stack, "flaky", script=text("no json yet"))
    workflow = create(
        stack,
        {
            "id": "flow",
            "type": "sequential",
            "nodes": [
                {"id": "one", "type": "agent", "agent_id": first, "input": "one"},
                {
                    "id": "two",
                    "type": "agent",
                    "agent_id": flaky,
                    "input": "two after {{nodes.one.output}}",
                    "output_schema": {"type": "object"},
                },
            ],
        },
    )
    failed = finished(stack, workflow["workflow_id"])
    assert failed["status"] == "failed" and failed["error"]["code"] == "output_invalid", failed
    # The second agent is fixed; the first is changed too, which a replay must not notice.
    for agent_id, words in ((flaky, '{"done": true}'), (first, "changed")):
        status, _, _ = stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", {"script": text(words)})
        assert status == 200

    status, _, replayed = stack.invoke_api("POST", f"/v1/runs/{failed['run_id']}/replay")

    assert status == 201, replayed
    ended = wait_for_run(stack, replayed["run_id"])
    assert ended["status"] == "succeeded" and ended["replay_of"] == failed["run_id"], ended
    assert json.loads(ended["output"]) == {"done": True}
    started = of_type(log(stack, ended["run_id"]), "node_started")
    assert [(d["node_id"], d.get("reused", False)) for d in started] == [("one", True), ("two", False)]
    # No model call for the reused node: no run of it, and the replay spent only what `two` did.
    (new_run,) = ended["children"]
    assert child(stack, new_run)["input"].startswith("two after step one done")
    assert ended["total_usage"]["output_tokens"] == child(stack, new_run)["usage"]["output_tokens"]


def test_invalid_definitions_are_422_naming_the_node(stack: LocalStack) -> None:
    echo = agent(stack, "echo")

    def refused(root: dict[str, Any]) -> dict[str, Any]:
        status, _, body = stack.invoke_api("POST", "/v1/workflows", {"name": "bad", "root": root})
        assert status == 422, body
        return dict(body["error"])

    def a(node_id: str, template: str = "x") -> dict[str, Any]:
        return {"id": node_id, "type": "agent", "agent_id": echo, "input": template}

    unknown = refused({"id": "s", "type": "sequential", "nodes": [a("one", "{{nodes.ghost.output}}")]})
    assert unknown["code"] == "unknown_node" and unknown["details"]["node_id"] == "one"
    early = refused({"id": "s", "type": "sequential", "nodes": [a("one", "{{nodes.two.output}}"), a("two")]})
    assert early["code"] == "node_not_run_yet" and early["details"]["node_id"] == "one"
    cycle = refused({"id": "s", "type": "sequential", "nodes": [a("one", "{{nodes.s.output}}")]})
    assert cycle["code"] == "reference_cycle" and cycle["details"]["node_id"] == "one"
    sibling = refused({"id": "p", "type": "parallel", "branches": [a("x1"), a("x2", "{{nodes.x1.output}}")]})
    assert sibling["code"] == "node_not_run_yet" and sibling["details"]["node_id"] == "x2"
    loop = {
        "id": "l",
        "type": "loop",
        "node": a("w"),
        "until": {"path": "nodes.w.output", "exists": True},
        "max_iterations": 51,
    }
    status, _, body = stack.invoke_api("POST", "/v1/workflows", {"name": "bad", "root": loop})
    assert status == 422 and "max_iterations" in json.dumps(body)


def test_versions_asl_and_tenancy(stack: LocalStack) -> None:
    echo = agent(stack, "echo")
    workflow = create(stack, {"id": "one", "type": "agent", "agent_id": echo, "input": "v1"})
    workflow_id = workflow["workflow_id"]
    status, _, published = stack.invoke_api(
        "PUT",
        f"/v1/workflows/{workflow_id}",
        {"name": "wf", "root": {"id": "one", "type": "agent", "agent_id": echo, "input": "v2"}},
    )
    assert status == 200 and published["version"] == 2
    _, _, listed = stack.invoke_api("GET", f"/v1/workflows/{workflow_id}/versions")
    assert [v["version"] for v in listed["versions"]] == [1, 2]
    assert all(":stateMachine:stepwise-wf-" in v["state_machine_arn"] for v in listed["versions"])
    status, _, asl = stack.invoke_api("GET", f"/v1/workflows/{workflow_id}/asl?version=1")
    assert status == 200 and asl["version"] == 1 and asl["definition"]["StartAt"] == "Workflow"

    old = wait_for_run(stack, run(stack, workflow_id, version=1))
    assert old["output"] == "You said: v1" and old["workflow_version"] == 1

    for method, path in (("GET", ""), ("GET", "/asl"), ("PUT", ""), ("POST", "/runs")):
        body = (
            {"name": "x", "root": {"id": "a", "type": "agent", "agent_id": echo, "input": "x"}}
            if method == "PUT"
            else {"input": {}}
            if method == "POST"
            else None
        )
        status, _, error = stack.invoke_api(method, f"/v1/workflows/{workflow_id}{path}", body, key=OTHER_KEY)
        assert status == 404 and error["error"]["code"] in ("workflow_not_found", "agent_not_found"), (
            method,
            path,
            error,
        )


def test_the_compiled_definitions_pass_the_asl_lint(stack: LocalStack) -> None:
    from tests.unit.test_workflows import AGENT, EVERY_KIND, assert_valid_asl

    # Every node kind at once (so the test stands alone), then whatever the other tests created.
    every = json.loads(json.dumps(EVERY_KIND).replace(AGENT, agent(stack, "any")))
    create(stack, every)
    _, _, listed = stack.invoke_api("GET", "/v1/workflows")
    shapes: dict[str, dict[str, Any]] = {}
    for found in listed["workflows"]:
        _, _, asl = stack.invoke_api("GET", f"/v1/workflows/{found['workflow_id']}/asl")
        definition = asl["definition"]
        # cfn-lint takes seconds per definition: one of each shape (its states' types and fields in order)
        # is linted, the same states under other names add nothing.
        shape = json.dumps(sorted(_shape(definition)))
        shapes.setdefault(shape, definition)
    assert_valid_asl(*shapes.values())


def _shape(machine: dict[str, Any]) -> list[str]:
    found = []
    for state in machine["States"].values():
        found.append(f"{state['Type']}:{','.join(sorted(state))}")
        for inner in state.get("Branches", []) + (
            [state["ItemProcessor"]] if "ItemProcessor" in state else []
        ):
            found += _shape(inner)
    return found


# --- Other entry points: an agent's tool, a schedule, an EventBridge rule ------------------------------


TOPIC = {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}


def _gated_lookup(stack: LocalStack) -> str:
    """A workflow that asks a human before an agent looks into `topic`."""
    echo = agent(stack, "echo")
    root = {
        "id": "flow",
        "type": "sequential",
        "nodes": [
            {"id": "gate", "type": "approval", "prompt": "Look into {{input.topic}}?"},
            {"id": "look", "type": "agent", "agent_id": echo, "input": "about {{input.topic}}"},
        ],
    }
    return str(create(stack, root, description="Looks into a topic.", input_schema=TOPIC)["workflow_id"])


def _mirrored_approval(stack: LocalStack, root_run_id: str) -> dict[str, Any]:
    def requested() -> dict[str, Any]:
        found = of_type(log(stack, root_run_id), "approval_requested")
        assert len(found) == 1, found
        return found[0]

    return eventually(requested, timeout=120, what="the workflow's approval in its caller's log")


def test_a_workflow_called_as_an_agent_s_tool(stack: LocalStack, exporter: InMemorySpanExporter) -> None:
    workflow_id = _gated_lookup(stack)
    caller = agent(stack, "caller", tools=[{"type": "workflow", "workflow_id": workflow_id}])
    _, _, shown = stack.invoke_api("GET", f"/v1/agents/{caller}")
    (declared,) = shown["tools"]  # named after the workflow, described by it, its input the schema
    assert (declared["name"], declared["description"]) == (workflow_id, "Looks into a topic.")
    assert declared["input_schema"] == TOPIC
    call = {"name": workflow_id, "arguments": {}}
    script = [{"tool_calls": [call, {**call, "arguments": {"topic": "tides"}}]}, {"text": "reported"}]
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{caller}/runs", {"message": "go", "script": script}
    )
    assert status == 202, accepted

    # The workflow's gate shows in the caller's stream (the app watches the root), answered as any.
    approval = _mirrored_approval(stack, accepted["run_id"])
    status, _, _ = stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{approval['interaction_id']}/respond",
        {"answer": {"approved": True}},
        headers={"Idempotency-Key": approval["interaction_id"]},
    )
    assert status == 202

    run = wait_for_run(stack, accepted["run_id"], timeout=120)
    assert run["status"] == "succeeded", run
    (workflow_run_id,) = run["children"]  # the call whose input the schema refused started nothing
    assert approval["run_id"] == workflow_run_id
    workflow_run = child(stack, workflow_run_id)
    assert (workflow_run["kind"], workflow_run["status"], workflow_run["output"]) == (
        "workflow",
        "succeeded",
        "You said: about tides",
    )
    assert (workflow_run["parent_run_id"], workflow_run["root_run_id"]) == (run["run_id"], run["run_id"])
    (node_run,) = workflow_run["children"]
    assert child(stack, node_run)["root_run_id"] == run["run_id"]
    events = log(stack, run["run_id"])
    refused, result = of_type(events, "tool_result")
    assert refused["error"]["code"] == "input_invalid" and result["output"] == "You said: about tides"
    (started,) = of_type(events, "delegation_started")
    assert started["child_run_id"] == workflow_run_id and started["workflow_id"] == workflow_id
    assert run["total_usage"]["output_tokens"] > run["usage"]["output_tokens"]  # the node's counted

    # One trace: caller → the tool call → the workflow run → each node → the node's own run.
    def spans() -> dict[str, Any]:
        found = {s.name: s for s in exporter.get_finished_spans()}
        assert {f"invoke_workflow {workflow_id}", "workflow_node look", "workflow_node gate"} <= set(found)
        assert f"invoke_agent {caller}" in found
        return found

    traced = eventually(spans, timeout=30, what="the workflow's spans")
    flow = traced[f"invoke_workflow {workflow_id}"]
    assert {s.context.trace_id for s in traced.values()} == {tracing.trace_id(run["run_id"])}
    assert flow.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert flow.parent.span_id == traced[f"execute_tool {workflow_id}"].context.span_id
    for node in ("gate", "look"):
        assert traced[f"workflow_node {node}"].parent.span_id == flow.context.span_id
    node_span = [s for s in exporter.get_finished_spans() if s.attributes.get("stepwise.run_id") == node_run]
    (node_agent,) = [s for s in node_span if s.name.startswith("invoke_agent")]
    assert node_agent.parent.span_id == traced["workflow_node look"].context.span_id

    # Cancelling the caller while the workflow waits cancels the workflow run (and closes its gate).
    status, _, again = stack.invoke_api(
        "POST", f"/v1/agents/{caller}/runs", {"message": "go", "script": script}
    )
    assert status == 202, again
    waiting = _mirrored_approval(stack, again["run_id"])
    status, _, cancelled = stack.invoke_api("POST", f"/v1/runs/{again['run_id']}/cancel")
    assert status == 200 and cancelled["status"] == "cancelled", cancelled
    assert wait_for_run(stack, waiting["run_id"])["status"] == "cancelled"
    _, _, listed = stack.invoke_api("GET", f"/v1/sessions/{again['session_id']}/interactions")
    assert [i["status"] for i in listed["interactions"]] == ["expired"]  # the gate's link answers 410

    status, _, refused_tool = stack.invoke_api(
        "POST",
        f"/v1/agents/{caller}/tools",
        {"type": "workflow", "name": "ghost", "workflow_id": "wfl_01HZZZZZZZZZZZZZZZZZZZZZZZ"},
    )
    assert status == 422 and refused_tool["error"]["code"] == "unknown_workflow", refused_tool


def test_a_schedule_and_an_eventbridge_rule_start_a_workflow_once(stack: LocalStack) -> None:
    import boto3

    from stepwise.schedules.service import SCHEDULED_TIME

    echo = agent(stack, "echo")
    template = "about {{input.topic}}{{input.event.source}}"
    root = {"id": "look", "type": "agent", "agent_id": echo, "input": template}
    schema = {"type": "object", "properties": {"topic": {"type": "string"}}}
    workflow_id = create(stack, root, input_schema=schema)["workflow_id"]
    path = f"/v1/workflows/{workflow_id}/schedules"
    status, _, refused = stack.invoke_api("POST", path, {"expression": "rate(1 day)", "input": {"topic": 5}})
    assert status == 422 and refused["error"]["code"] == "input_invalid", refused
    # One firing far ahead, which the local ticker never reaches: the test delivers it itself.
    body = {"expression": "at(2099-01-01T00:00:00)", "input": {"topic": "tides"}}
    status, _, schedule = stack.invoke_api("POST", path, body)
    assert status == 201 and schedule["workflow_id"] == workflow_id, schedule
    assert schedule["input"] == {"topic": "tides"} and schedule["next_run"].startswith("2099-01-01")
    twin = boto3.client("scheduler").get_schedule(
        Name=schedule["schedule_id"], GroupName=stack.resolver.physical["ScheduleGroup"]
    )
    payload = json.loads(twin["Target"]["Input"].replace(SCHEDULED_TIME, "2099-01-01T00:00:00Z"))

    first = stack.lambdas.invoke("SchedulerFunction", payload)
    again = stack.lambdas.invoke("SchedulerFunction", payload)  # Scheduler delivers at least once

    assert (first["status"], again["status"]) == ("started", "duplicate"), (first, again)
    ended = wait_for_run(stack, first["run_id"])
    assert (ended["kind"], ended["status"], ended["output"]) == (
        "workflow",
        "succeeded",
        "You said: about tides",
    )
    assert ended["metadata"]["schedule_id"] == schedule["schedule_id"]

    # A rule whose target adds the tenant and the workflow: the event is the workflow's input, once.
    event = {"id": "ev-1", "detail-type": "Lead", "source": "crm", "time": ended["finished_at"], "detail": {}}
    rule = {"tenant_id": "local", "workflow_id": workflow_id, "event": event}
    by_event = stack.lambdas.invoke("SchedulerFunction", rule)
    assert stack.lambdas.invoke("SchedulerFunction", rule)["status"] == "duplicate"
    ended = wait_for_run(stack, by_event["run_id"])
    assert (ended["status"], ended["output"]) == ("succeeded", "You said: about crm"), ended
    assert json.loads(ended["input"])["event"]["detail-type"] == "Lead"

    status, _, listed = stack.invoke_api("GET", path)
    assert [s["schedule_id"] for s in listed["schedules"]] == [schedule["schedule_id"]]
    status, _, _ = stack.invoke_api("DELETE", f"/v1/workflows/{workflow_id}")
    assert status == 204
    status, _, _ = stack.invoke_api("GET", path)
    assert status == 404
    gone = stack.lambdas.invoke("SchedulerFunction", {**payload, "scheduled_time": "2099-01-02T00:00:00Z"})
    assert gone["status"] == "skipped", gone  # the schedule went with its workflow
