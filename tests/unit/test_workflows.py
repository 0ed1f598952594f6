"""Workflows' pure parts: the expression language, the checks at creation, and the compiled ASL (linted by
cfn-lint's state machine schema, as statemachine/*.asl.json are, plus every transition resolving)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stepwise.core.errors import Unprocessable
from stepwise.workflows import checks, compiler, expressions
from stepwise.workflows.models import Definition

AGENT = "agt_01HZZZZZZZZZZZZZZZZZZZZZZZ"
FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:WorkflowFunction"


def agent(node_id: str, template: str = "go", **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "agent", "agent_id": AGENT, "input": template, **extra}


def root(node: dict[str, Any]) -> Any:
    return Definition.model_validate({"name": "w", "root": node}).root


EVERY_KIND = {
    "id": "all",
    "type": "sequential",
    "nodes": [
        agent(
            "research",
            "Research {{input.topic}}",
            output_schema={"type": "object"},
            retry={"max_attempts": 2},
        ),
        {
            "id": "fan",
            "type": "map",
            "over": "nodes.research.output.items",
            "node": agent("score", "{{item.name}}"),
        },
        {"id": "both", "type": "parallel", "branches": [agent("b1"), agent("b2", on_error="continue")]},
        {"id": "bounded", "type": "parallel", "max_concurrency": 1, "branches": [agent("c1"), agent("c2")]},
        {
            "id": "revise",
            "type": "loop",
            "max_iterations": 3,
            "until": {"path": "nodes.critic.output.verdict", "equals": "approved"},
            "node": {
                "id": "round",
                "type": "sequential",
                "nodes": [
                    agent("writer", "{{nodes.critic.output}}"),
                    agent("critic", "{{nodes.writer.output}}"),
                ],
            },
        },
        {
            "id": "route",
            "type": "branch",
            "on": "nodes.research.output.kind",
            "cases": {"a": agent("case_a"), "true": agent("case_t")},
            "default": agent("case_d"),
        },
        {"id": "gate", "type": "approval", "prompt": "ok? {{nodes.round.output}}", "timeout_seconds": 60},
    ],
}


def _scopes(machine: dict[str, Any]) -> list[dict[str, Any]]:
    found = [machine]
    for state in machine["States"].values():
        for branch in state.get("Branches", []):
            found += _scopes(branch)
        if "ItemProcessor" in state:
            found += _scopes(state["ItemProcessor"])
    return found


def assert_valid_asl(*definitions: dict[str, Any]) -> None:
    """cfn-lint's schema for state machines (E3601), then what it does not check: every StartAt, Next,
    Default and Catch target names a state of its own scope, every state is reached, names are unique."""
    from cfnlint.api import ManualArgs, lint

    inline = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Resources": {
            f"Machine{i}": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {"RoleArn": "arn:aws:iam::123456789012:role/wf", "Definition": definition},
            }
            for i, definition in enumerate(definitions)
        },
    }
    assert [str(m) for m in lint(json.dumps(inline), config=ManualArgs(regions=["us-east-1"]))] == []
    for definition in definitions:
        _assert_transitions(definition)


def _assert_transitions(definition: dict[str, Any]) -> None:
    names: list[str] = []
    for scope in _scopes(definition):
        states = scope["States"]
        names += list(states)
        targets = {scope["StartAt"]}
        for name, state in states.items():
            found = [state.get("Next"), state.get("Default")]
            found += [c["Next"] for c in state.get("Choices", []) + state.get("Catch", [])]
            for target in filter(None, found):
                assert target in states, f"{name} → {target}: not in its scope"
                targets.add(target)
            assert "Next" in state or state.get("End") or state["Type"] in ("Choice", "Fail", "Succeed"), name
        assert set(states) == targets, f"unreached: {set(states) - targets}"
    assert len(names) == len(set(names)), "state names repeat"


def test_every_node_kind_compiles_to_valid_asl() -> None:
    tree = root(EVERY_KIND)
    checks.check(tree)

    definition = compiler.compile_definition(tree, function_arn=FUNCTION)

    assert_valid_asl(definition)
    states = definition["States"]["Workflow"]["Branches"][0]["States"]
    assert (
        states["fan"]["Type"] == "Map"
        and states["fan"]["ItemProcessor"]["ProcessorConfig"]["Mode"] == "INLINE"
    )
    assert states["fan.Distributed"]["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert states["fan.Mode"]["Choices"][0]["NumericGreaterThan"] == compiler.DISTRIBUTED_ABOVE
    assert states["both"]["Type"] == "Parallel" and states["bounded"]["MaxConcurrency"] == 1
    assert states["revise"]["Type"] == "Choice" and states["route"]["Type"] == "Choice"
    assert states["research"]["Resource"].endswith("waitForTaskToken")
    assert states["gate"]["TimeoutSeconds"] == 60
    assert {
        "ErrorEquals": compiler.RUN_ERRORS,
        "IntervalSeconds": 1,
        "MaxAttempts": 1,
        "BackoffRate": 2.0,
    } in states["research"]["Retry"]
    assert FUNCTION in json.dumps(definition) and compiler.FUNCTION not in json.dumps(definition)


def test_a_sequential_node_adds_no_state_and_an_agent_two() -> None:
    tree = root({"id": "s", "type": "sequential", "nodes": [agent("a"), agent("b"), agent("c")]})
    inner = compiler.compile_definition(tree)["States"]["Workflow"]["Branches"][0]["States"]
    happy = [n for n in inner if not n.endswith(".Failed")]
    # Two transitions per agent node on the happy path (start and wait, then done), plus Finish.
    assert sorted(happy) == sorted(["a", "a.Done", "b", "b.Done", "c", "c.Done", "Finish"])


@pytest.mark.parametrize(
    ("node", "problem", "node_id"),
    [
        (
            {"id": "s", "type": "sequential", "nodes": [agent("a", "{{nodes.zz.output}}")]},
            "unknown_node",
            "a",
        ),
        (
            {"id": "s", "type": "sequential", "nodes": [agent("a", "{{nodes.b.output}}"), agent("b")]},
            "node_not_run_yet",
            "a",
        ),
        (
            {"id": "s", "type": "sequential", "nodes": [agent("a", "{{nodes.s.output}}")]},
            "reference_cycle",
            "a",
        ),
        (
            {"id": "s", "type": "sequential", "nodes": [agent("a", "{{nodes.a.output}}")]},
            "reference_cycle",
            "a",
        ),
        ({"id": "s", "type": "sequential", "nodes": [agent("a"), agent("a")]}, "duplicate_node_id", "a"),
        (agent("a", "{{item}}"), "item_outside_map", "a"),
        (agent("a", "{{ secrets.key }}"), "invalid_path", "a"),
        (
            {
                "id": "s",
                "type": "sequential",
                "nodes": [
                    {"id": "br", "type": "branch", "on": "input.k", "cases": {"x": agent("inside")}},
                    agent("after", "{{nodes.inside.output}}"),
                ],
            },
            "node_not_run_yet",
            "after",
        ),
        (
            {"id": "m", "type": "map", "over": "nodes.late.output", "node": agent("x")},
            "unknown_node",
            "m",
        ),
    ],
)
def test_invalid_references_name_the_node(node: dict[str, Any], problem: str, node_id: str) -> None:
    with pytest.raises(Unprocessable) as raised:
        checks.check(root(node))

    assert raised.value.code == problem and raised.value.details["node_id"] == node_id


def test_what_ran_before_is_available() -> None:
    tree = root(
        {
            "id": "s",
            "type": "sequential",
            "nodes": [
                {"id": "inner", "type": "sequential", "nodes": [agent("a")]},
                {
                    "id": "l",
                    "type": "loop",
                    "max_iterations": 2,
                    "until": {"path": "nodes.b.output", "exists": True},
                    "node": agent("b", "{{nodes.a.output}} {{nodes.b.output}}"),
                },
                agent("c", "{{nodes.inner.output}} {{nodes.l.output}} {{nodes.b.output}} {{input.x}}"),
            ],
        }
    )
    with pytest.raises(Unprocessable):  # b reads itself: a cycle even in a loop
        checks.check(tree)
    tree.nodes[1].node.input = "{{nodes.a.output}}"
    checks.check(tree)
    assert checks.aliases(tree)["inner"] == "a" and checks.aliases(tree)["l"] == "b"


def test_loops_are_bounded() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        root(
            {
                "id": "l",
                "type": "loop",
                "node": agent("a"),
                "until": {"path": "input.x", "exists": True},
                "max_iterations": 51,
            }
        )
    with pytest.raises(ValidationError):  # one test per condition
        root(
            {
                "id": "l",
                "type": "loop",
                "node": agent("a"),
                "until": {"path": "input.x", "exists": True, "equals": 1},
                "max_iterations": 5,
            }
        )


def test_templates_render_values_and_nothing_else() -> None:
    data = {
        "input": {"topic": "tides", "n": 3},
        "nodes": {"r": {"output": {"items": ["a", "b"], "ok": True}}},
        "item": {"name": "x"},
    }

    rendered = expressions.render(
        "{{input.topic}}|{{ input.n }}|{{nodes.r.output.items}}|{{nodes.r.output.items.1}}"
        "|{{item.name}}|{{input.none}}",
        data,
    )

    assert rendered == 'tides|3|["a","b"]|b|x|'
    assert expressions.parse("nodes.r.output.items.0").jsonpath == "$.nodes.r.output.items[0]"
    with pytest.raises(expressions.BadPath):
        expressions.parse("nodes.r.input")
    with pytest.raises(expressions.BadPath):
        expressions.parse("input['x']")


def test_conditions_compile_to_typed_choice_rules() -> None:
    from stepwise.workflows.models import Condition

    c = compiler.Compiler(root(agent("a")))
    assert c.rule(Condition(path="input.ok", equals=True))["And"][2] == {
        "Variable": "$.input.ok",
        "BooleanEquals": True,
    }
    assert c.rule(Condition(path="input.n", equals=2))["And"][2] == {
        "Variable": "$.input.n",
        "NumericEquals": 2,
    }
    assert c.rule(Condition(path="input.s", matches="*ok*"))["And"][2] == {
        "Variable": "$.input.s",
        "StringMatches": "*ok*",
    }
    assert c.rule(Condition(path="input.s", exists=False)) == {"Variable": "$.input.s", "IsPresent": False}


def test_the_cli_runs_a_workflow_and_follows_its_nodes() -> None:
    from tests.unit.test_cli import RUN, FakeApi, cli, event, finished

    api = FakeApi()
    api.routes["POST /v1/workflows/wfl_1/runs"] = (
        202,
        {"run_id": RUN, "workflow_id": "wfl_1", "version": 2, "status": "running"},
    )
    api.routes[f"GET /v1/runs/{RUN}/events"] = api.events(
        {
            "events": [event(1, "node_started", node_id="score", index=3, child_run_id="run_2")],
            "next": 1,
            "done": False,
        },
        {
            "events": [
                event(
                    2, "node_failed", node_id="score", index=3, error={"code": "timed_out", "message": "late"}
                ),
                event(3, "run_completed", output="[]", steps=0, usage={}),
            ],
            "next": 3,
            "done": True,
        },
    )
    api.routes[f"GET /v1/runs/{RUN}"] = (
        200,
        finished("succeeded", output="[]", trigger="workflow", kind="workflow"),
    )

    outcome = cli(api, "workflows", "run", "wfl_1", "--input", '{"items": [1]}', "--version", "2")

    assert outcome.code == 0, outcome.err
    assert "> score[3] run run_2" in outcome.out and "! score[3] failed: timed_out: late" in outcome.out
    assert json.loads(api.requests[0].content) == {"input": {"items": [1]}, "version": 2}
    assert cli(api, "workflows", "run", "wfl_1", "--input", "{nope").code != 0
