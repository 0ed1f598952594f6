"""Workflows on the real compiled ASL in moto: what a workflow adds on top of its agents' own runs.

Two workflows of the bench's one-step agent (it answers at once, no tools): a 3-node sequential and a
5-item map (over the input's list). Each is run RUNS times and measured against running the same agents
as separate runs (3 and 5 runs started through the API):

- state transitions, by bench/transitions.py's rule, over the workflow's own execution and over every
  agent run's execution (the workflow's children run on the agent-run machine, like separate runs);
- Lambda invocations: every task of every execution (WorkflowFunction and the agent-run machine's);
- DynamoDB requests and units, every request (failed conditional writes and index writes included,
  bench/meter.py), the API request that starts it included;
- cost per 1,000 workflow runs: transitions, Lambda requests and DynamoDB units at bench/pricing.py's
  prices (Lambda duration is left out on both sides: the agents' own model time is the same either way,
  and the workflow tasks are short);
- overhead per node: (workflow − separate runs) / nodes, for transitions, invocations and requests.

The goal (issue 25): the workflow adds at most 3 transitions per node.
"""

from __future__ import annotations

import time
from typing import Any

from bench.dynamodb_ops import totals
from bench.harness import Local, Section, local
from bench.meter import Recorder
from bench.pricing import DYNAMODB_RRU, DYNAMODB_WRU, LAMBDA_REQUEST, SFN_TRANSITION
from bench.transitions import lambda_tasks, transitions

RUNS = 3
GOAL = 3  # transitions added per node
DEADLINE = 120.0


def _history(env: Local, execution_arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = env.sfn().get_execution_history(
            executionArn=execution_arn, maxResults=1000, **({"nextToken": token} if token else {})
        )
        events += page["events"]
        token = page.get("nextToken")
        if not token:
            return events


def _ended(env: Local, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        _, _, view = env.stack.invoke_api("GET", f"/v1/runs/{run_id}")
        if view["status"] not in ("queued", "running", "waiting"):
            return dict(view)
        time.sleep(0.1)
    raise RuntimeError(f"run {run_id} did not end")


def _settled(env: Local, execution_arn: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while env.sfn().describe_execution(executionArn=execution_arn)["status"] == "RUNNING":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{execution_arn} still running")
        time.sleep(0.05)


def _agent_execution(run_id: str) -> str:
    from stepwise.core import config

    return config.machine().execution_arn(run_id)


def _measure(env: Local, recorder: Recorder, start: Any) -> dict[str, Any]:
    """Start (under the recorder), wait for every execution, then count them."""
    before = len(recorder.requests)
    with recorder.charging("start"):
        workflow_arn, run_ids = start()
    agent_arns = [_agent_execution(r) for r in run_ids()]
    for arn in ([workflow_arn] if workflow_arn else []) + agent_arns:
        _settled(env, arn)
    histories = {arn: _history(env, arn) for arn in ([workflow_arn] if workflow_arn else []) + agent_arns}
    own = histories.get(workflow_arn, []) if workflow_arn else []
    counted = totals(recorder.requests[before:])
    return {
        "transitions": sum(transitions(h) for h in histories.values()),
        "own_transitions": transitions(own),
        "invocations": sum(lambda_tasks(h) for h in histories.values()),
        "requests": counted["requests"],
        "wru": counted["wru"],
        "rru": counted["rru"],
    }


def _cost(m: dict[str, Any]) -> float:
    per_run = (
        m["transitions"] * SFN_TRANSITION
        + m["invocations"] * LAMBDA_REQUEST
        + m["wru"] * DYNAMODB_WRU
        + m["rru"] * DYNAMODB_RRU
    )
    return per_run * 1000


def run() -> Section:
    from stepwise.workflows import service

    env = local()
    section = Section("Workflows: a 3-node sequential and a 5-item map against separate runs")
    agent_id = env.create_agent({"name": "wf-bench", "script": [{"text": "ok"}]})
    shapes = {
        "sequential (3 nodes)": (
            3,
            {
                "id": "s",
                "type": "sequential",
                "nodes": [
                    {"id": f"n{i}", "type": "agent", "agent_id": agent_id, "input": "go"} for i in range(3)
                ],
            },
            {},
        ),
        "map (5 items)": (
            5,
            {
                "id": "m",
                "type": "map",
                "over": "input.items",
                "node": {"id": "x", "type": "agent", "agent_id": agent_id, "input": "{{item}}"},
            },
            {"items": [1, 2, 3, 4, 5]},
        ),
    }
    recorder = Recorder(env)
    with recorder.installed():
        for label, (nodes, root, payload) in shapes.items():
            _, _, created = env.stack.invoke_api("POST", "/v1/workflows", {"name": label, "root": root})
            workflow_id = created["workflow_id"]
            workflow: list[dict[str, Any]] = []
            separate: list[dict[str, Any]] = []
            for _ in range(RUNS):
                holder: dict[str, Any] = {}

                def start_workflow(
                    holder: dict[str, Any] = holder, workflow_id: str = workflow_id, payload: Any = payload
                ) -> tuple[str, Any]:
                    _, _, accepted = env.stack.invoke_api(
                        "POST", f"/v1/workflows/{workflow_id}/runs", {"input": payload}
                    )
                    holder["view"] = _ended(env, accepted["run_id"])
                    arn = service.execution_arn(workflow_id, 1, accepted["run_id"])
                    return arn, lambda: holder["view"]["children"]

                workflow.append(_measure(env, recorder, start_workflow))

                def start_runs(nodes: int = nodes) -> tuple[None, Any]:
                    ids = [env.start(None, 1, agent_id=agent_id) for _ in range(nodes)]
                    for run_id in ids:
                        _ended(env, run_id)
                    return None, lambda: ids

                separate.append(_measure(env, recorder, start_runs))
            w = {k: sum(m[k] for m in workflow) / RUNS for k in workflow[0]}
            s = {k: sum(m[k] for m in separate) / RUNS for k in separate[0]}
            added = (w["transitions"] - s["transitions"]) / nodes
            section.add(
                f"{label}: transitions per workflow run",
                w["transitions"],
                note=f"{s['transitions']:.0f} as separate runs",
            )
            section.add(
                f"{label}: transitions the workflow adds per node", added, note=f"goal ≤ {GOAL}", digits=2
            )
            section.add(
                f"{label}: Lambda invocations",
                w["invocations"],
                note=f"{s['invocations']:.0f} as separate runs",
            )
            section.add(
                f"{label}: Lambda invocations added per node",
                (w["invocations"] - s["invocations"]) / nodes,
                digits=2,
            )
            section.add(
                f"{label}: DynamoDB requests", w["requests"], note=f"{s['requests']:.0f} as separate runs"
            )
            section.add(
                f"{label}: DynamoDB requests added per node",
                (w["requests"] - s["requests"]) / nodes,
                digits=1,
            )
            section.add(
                f"{label}: cost per 1,000 runs",
                _cost(w),
                "USD",
                note=f"{_cost(s):.4f} as separate runs",
                digits=4,
            )
            section.details[label] = {"workflow": workflow, "separate": separate}
            if added > GOAL:
                section.notes.append(
                    f"{label}: {added:.2f} transitions added per node, over the goal of {GOAL}"
                )
    section.notes.append(
        "Cost counts transitions, Lambda requests and DynamoDB units; Lambda duration is left out on both "
        "sides."
    )
    return section
