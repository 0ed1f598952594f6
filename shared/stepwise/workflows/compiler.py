"""A workflow version compiled to Amazon States Language.

- the whole graph sits in one Parallel state (`Workflow`) for its Catch: whatever fails past the nodes'
  own handling ends the workflow run failed (`Failed`), and a `Finish` task ends it succeeded;
- sequential → a chain of states (its output is its last node's: no state copies it);
- parallel → a Parallel state (with `max_concurrency`: a Map over the branch indexes whose iteration
  picks its branch with a Choice, since a Parallel state has no concurrency bound);
- map → a Map state, inline; a Pass counts the items first and a Choice sends more than 40 to the same
  iteration as a Distributed Map (child executions, in AWS);
- loop → the body, a Pass that counts the iteration, and a Choice on `until` and the counter;
- branch → a Choice on `on`, each case ending in a Pass that copies its output to the branch's;
- agent and approval → a Task on the workflow-node Lambda that waits on a task token (the child run's or
  the approval's), then a Task that turns what came back into the node's output.

The data each state carries: `ctx` (tenant, run, workflow, version), `input`, `nodes` ({id: {output}}),
`iter` (loop counters), `at` (map indexes, "/0/2") and inside a map `item` and `index`; `last` and
`caught` are scratch. Node outputs over `INLINE_LIMIT` are references to the child run that holds them.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from stepwise.workflows import checks, expressions
from stepwise.workflows.models import (
    AgentNode,
    ApprovalNode,
    BranchNode,
    Condition,
    LoopNode,
    MapNode,
    ParallelNode,
    SequentialNode,
)

FUNCTION = "${WorkflowFunctionArn}"
DISTRIBUTED_ABOVE = 40  # items: an inline Map's history grows with each; above this, child executions
DEFAULT_TIMEOUT = 24 * 3600  # seconds an agent node or an approval waits, unless the node says
WORKFLOW_TIMEOUT = 7 * 24 * 3600
END = "\x00end"  # a leaf's successor while it is compiled as the end of a branch or an iteration
LAMBDA_ERRORS = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]
# What a failed child run sends back (stepwise.runs.ending): a node's `retry` starts it anew on these.
RUN_ERRORS = ["Run.Failed", "States.Timeout"]


def _lambda_retry() -> list[dict[str, Any]]:
    return [
        {
            "ErrorEquals": LAMBDA_ERRORS,
            "IntervalSeconds": 1,
            "MaxAttempts": 3,
            "BackoffRate": 2,
            "JitterStrategy": "FULL",
        }
    ]


def _call(action: str, node_id: str | None, *, wait: bool = False) -> dict[str, Any]:
    payload: dict[str, Any] = {"action": action, "state.$": "$"}
    if node_id is not None:
        payload["node"] = node_id
    if wait:
        payload["token.$"] = "$$.Task.Token"
        payload["attempt.$"] = "$$.State.RetryCount"
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken"
        if wait
        else "arn:aws:states:::lambda:invoke",
        "Parameters": {"FunctionName": FUNCTION, "Payload": payload},
        "Retry": _lambda_retry(),
    }


class Compiler:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.alias = checks.aliases(root)

    def path(self, text: str) -> str:
        parsed = expressions.parse(text)
        if parsed.root == "nodes":
            parsed = expressions.Path("nodes", self.alias[str(parsed.node)], parsed.rest)
        return parsed.jsonpath

    # --- conditions ---------------------------------------------------------------------------------

    def rule(self, condition: Condition) -> dict[str, Any]:
        variable = self.path(condition.path)
        present = {"Variable": variable, "IsPresent": True}
        test = condition.test
        if test == "exists":
            return {"Variable": variable, "IsPresent": bool(condition.exists)}
        if test == "matches":
            return {
                "And": [
                    present,
                    {"Variable": variable, "IsString": True},
                    {"Variable": variable, "StringMatches": condition.matches},
                ]
            }
        value = condition.equals
        if value is None:
            return {"And": [present, {"Variable": variable, "IsNull": True}]}
        if isinstance(value, bool):
            return {
                "And": [
                    present,
                    {"Variable": variable, "IsBoolean": True},
                    {"Variable": variable, "BooleanEquals": value},
                ]
            }
        if isinstance(value, int | float):
            return {
                "And": [
                    present,
                    {"Variable": variable, "IsNumeric": True},
                    {"Variable": variable, "NumericEquals": value},
                ]
            }
        return {
            "And": [
                present,
                {"Variable": variable, "IsString": True},
                {"Variable": variable, "StringEquals": value},
            ]
        }

    def case_rule(self, on: str, value: str) -> dict[str, Any]:
        """A case key is a string (JSON keys are): it matches the same string, and the boolean or
        number it spells."""
        rules = [self.rule(Condition(path=on, equals=value))]
        if value in ("true", "false"):
            rules.append(self.rule(Condition(path=on, equals=value == "true")))
        else:
            with contextlib.suppress(ValueError):
                rules.append(self.rule(Condition(path=on, equals=float(value))))
        return rules[0] if len(rules) == 1 else {"Or": rules}

    # --- nodes --------------------------------------------------------------------------------------

    def node(self, node: Any, next_: str, states: dict[str, Any], inherited: dict[str, Any]) -> str:
        """Add `node`'s states to `states`, ending at `next_`; returns the name of its first state.
        `inherited`: the timeout and retry a composite passes to the leaves that set none."""
        defaults = {
            "timeout_seconds": node.timeout_seconds or inherited.get("timeout_seconds"),
            "retry": node.retry or inherited.get("retry"),
        }
        if isinstance(node, AgentNode | ApprovalNode):
            return self.leaf(node, next_, states, defaults)
        passed = {
            k: v
            for k, v in defaults.items()
            if not (k == "retry" and isinstance(node, ParallelNode | MapNode))
        }
        if isinstance(node, SequentialNode):
            start = next_
            for child in reversed(node.nodes):
                start = self.node(child, start, states, passed)
            return start
        if isinstance(node, ParallelNode):
            return self.parallel(node, next_, states, passed)
        if isinstance(node, MapNode):
            return self.map(node, next_, states, passed)
        if isinstance(node, LoopNode):
            return self.loop(node, next_, states, passed)
        if isinstance(node, BranchNode):
            return self.branch(node, next_, states, passed)
        raise TypeError(f"unknown node {node!r}")

    def _on_error(self, node: Any, state: dict[str, Any], next_: str, states: dict[str, Any]) -> None:
        """A failure the node itself cannot handle goes to `<id>.Failed`: it records `node_failed` and
        then either gives the node a null output and goes on (`on_error: continue`) or fails on."""
        state["Catch"] = [
            {"ErrorEquals": ["States.ALL"], "ResultPath": "$.caught", "Next": f"{node.id}.Failed"}
        ]
        failed = _call("node_failed", node.id)
        failed["Comment"] = (
            "Record node_failed; with on_error fail this raises NodeFailed, which fails on outward."
        )
        failed["ResultSelector"] = {"output.$": "$.Payload.output", "error.$": "$.Payload.error"}
        failed["ResultPath"] = f"$.nodes.{node.id}"
        failed["Next"] = next_
        states[f"{node.id}.Failed"] = failed

    def leaf(self, node: Any, next_: str, states: dict[str, Any], defaults: dict[str, Any]) -> str:
        approval = isinstance(node, ApprovalNode)
        wait = _call("start_approval" if approval else "start_node", node.id, wait=True)
        wait["Comment"] = (
            "Ask for the approval with this task token; its answer comes back on it."
            if approval
            else "Start the node's child run carrying this task token; the run's ending sends it back. "
            "No Lambda runs meanwhile."
        )
        wait["TimeoutSeconds"] = int(defaults["timeout_seconds"] or DEFAULT_TIMEOUT)
        wait["ResultPath"] = "$.last"
        retry = defaults["retry"]
        if retry is not None and retry.max_attempts > 1 and not approval:
            wait["Retry"].append(
                {
                    "ErrorEquals": RUN_ERRORS,
                    "IntervalSeconds": 1,
                    "MaxAttempts": retry.max_attempts - 1,
                    "BackoffRate": retry.backoff_rate,
                }
            )
        wait["Next"] = f"{node.id}.Done"
        done = _call("approval_done" if approval else "node_done", node.id)
        done["Comment"] = "Check what came back (the output schema, the decision) and record node_completed."
        done["ResultSelector"] = {"output.$": "$.Payload.output"}
        done["ResultPath"] = f"$.nodes.{node.id}"
        done["Next"] = next_
        states[node.id], states[f"{node.id}.Done"] = wait, done
        self._on_error(node, wait, next_, states)
        self._on_error(node, done, next_, states)
        if isinstance(node, AgentNode) and node.output_schema is not None:
            # One repair turn: an answer that does not validate gets one more run on the same session.
            done["Catch"].insert(
                0, {"ErrorEquals": ["WorkflowRepair"], "ResultPath": "$.caught", "Next": f"{node.id}.Repair"}
            )
            repair = _call("repair_node", node.id, wait=True)
            repair["Comment"] = "Ask the agent once more, on the same session, for an answer that validates."
            repair["TimeoutSeconds"] = int(defaults["timeout_seconds"] or DEFAULT_TIMEOUT)
            repair["ResultPath"] = "$.last"
            repair["Next"] = f"{node.id}.Done"
            states[f"{node.id}.Repair"] = repair
            self._on_error(node, repair, next_, states)
        return str(node.id)

    def _sub(self, node: Any, inherited: dict[str, Any]) -> dict[str, Any]:
        """A branch or an iteration: `node`'s states, whose output is `node`'s output. An agent or an
        approval ends in its own tasks (their OutputPath picks the output: no extra transition per item);
        any other node ends in a Pass that does."""
        states: dict[str, Any] = {}
        output = f"$.nodes.{self.alias[node.id]}.output"
        if isinstance(node, AgentNode | ApprovalNode):
            start = self.node(node, END, states, inherited)
            for state in states.values():
                if state.get("Next") == END:
                    del state["Next"]
                    state.update(OutputPath=output, End=True)
            return {"StartAt": start, "States": states}
        out = f"{node.id}.Out"
        states[out] = {"Type": "Pass", "OutputPath": output, "End": True}
        start = self.node(node, out, states, inherited)
        return {"StartAt": start, "States": states}

    def _composite_end(self, node: Any, state: dict[str, Any], next_: str, states: dict[str, Any]) -> None:
        state["ResultSelector"] = {"output.$": "$"}
        state["ResultPath"] = f"$.nodes.{node.id}"
        state["Next"] = next_
        if node.retry is not None and node.retry.max_attempts > 1:
            state["Retry"] = [
                {
                    "ErrorEquals": ["States.ALL"],
                    "IntervalSeconds": 1,
                    "MaxAttempts": node.retry.max_attempts - 1,
                    "BackoffRate": node.retry.backoff_rate,
                }
            ]
        if node.on_error == "continue":
            self._on_error(node, state, next_, states)

    def parallel(
        self, node: ParallelNode, next_: str, states: dict[str, Any], inherited: dict[str, Any]
    ) -> str:
        if node.max_concurrency is None:
            state: dict[str, Any] = {
                "Type": "Parallel",
                "Branches": [self._sub(b, inherited) for b in node.branches],
            }
        else:
            inner: dict[str, Any] = {}
            pick: dict[str, Any] = {"Type": "Choice", "Choices": []}
            for index, branch in enumerate(node.branches):
                sub = self._sub(branch, inherited)
                inner.update(sub["States"])
                pick["Choices"].append(
                    {"Variable": "$.branch", "NumericEquals": index, "Next": sub["StartAt"]}
                )
            inner[f"{node.id}.Pick"] = pick
            state = {
                "Type": "Map",
                "Comment": "A Parallel with a concurrency bound: one iteration per branch, picking its own.",
                "ItemsPath": "$.branches",
                "ItemSelector": {**self._carried(), "branch.$": "$$.Map.Item.Value"},
                "MaxConcurrency": node.max_concurrency,
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": f"{node.id}.Pick",
                    "States": inner,
                },
            }
            states[f"{node.id}.Branches"] = {
                "Type": "Pass",
                "Result": list(range(len(node.branches))),
                "ResultPath": "$.branches",
                "Next": node.id,
            }
        self._composite_end(node, state, next_, states)
        states[node.id] = state
        return f"{node.id}.Branches" if node.max_concurrency is not None else str(node.id)

    def _carried(self) -> dict[str, Any]:
        return {
            "ctx.$": "$.ctx",
            "input.$": "$.input",
            "nodes.$": "$.nodes",
            "iter.$": "$.iter",
            "at.$": "$.at",
        }

    def map(self, node: MapNode, next_: str, states: dict[str, Any], inherited: dict[str, Any]) -> str:
        over = self.path(node.over)
        selector = {
            **self._carried(),
            "item.$": "$$.Map.Item.Value",
            "index.$": "$$.Map.Item.Index",
            "at.$": "States.Format('{}/{}', $.at, $$.Map.Item.Index)",
        }
        for mode, name in (("INLINE", node.id), ("DISTRIBUTED", f"{node.id}.Distributed")):
            sub = self._sub(node.node, inherited)
            if mode == "DISTRIBUTED":  # its states need names of their own
                sub = _renamed(sub, "-d")
            processor: dict[str, Any] = {"ProcessorConfig": {"Mode": mode}, **sub}
            if mode == "DISTRIBUTED":
                processor["ProcessorConfig"]["ExecutionType"] = "STANDARD"
            state: dict[str, Any] = {
                "Type": "Map",
                "ItemsPath": over,
                "ItemSelector": selector,
                "ItemProcessor": processor,
            }
            if node.max_concurrency is not None:
                state["MaxConcurrency"] = node.max_concurrency
            if mode == "DISTRIBUTED":
                state["Label"] = node.id[:40]
            self._composite_end(node, state, next_, states)
            states[name] = state
        states[f"{node.id}.Size"] = {
            "Type": "Pass",
            "Comment": f"Count the items: more than {DISTRIBUTED_ABOVE} run as a Distributed Map.",
            "Parameters": {"count.$": f"States.ArrayLength({over})"},
            "ResultPath": "$.size",
            "Next": f"{node.id}.Mode",
        }
        states[f"{node.id}.Mode"] = {
            "Type": "Choice",
            "Choices": [
                {
                    "Variable": "$.size.count",
                    "NumericGreaterThan": DISTRIBUTED_ABOVE,
                    "Next": f"{node.id}.Distributed",
                }
            ],
            "Default": node.id,
        }
        return f"{node.id}.Size"

    def loop(self, node: LoopNode, next_: str, states: dict[str, Any], inherited: dict[str, Any]) -> str:
        count, check = f"{node.id}.Count", node.id
        body = self.node(node.node, count, states, inherited)
        states[f"{node.id}.Init"] = {
            "Type": "Pass",
            "Result": {"n": 0},
            "ResultPath": f"$.iter.{node.id}",
            "Next": body,
        }
        states[count] = {
            "Type": "Pass",
            "Parameters": {"n.$": f"States.MathAdd($.iter.{node.id}.n, 1)"},
            "ResultPath": f"$.iter.{node.id}",
            "Next": check,
        }
        states[check] = {
            "Type": "Choice",
            "Comment": f"Until the condition holds, at most {node.max_iterations} iterations.",
            "Choices": [
                {**self.rule(node.until), "Next": next_},
                {
                    "Variable": f"$.iter.{node.id}.n",
                    "NumericGreaterThanEquals": node.max_iterations,
                    "Next": next_,
                },
            ],
            "Default": body,
        }
        return f"{node.id}.Init"

    def branch(self, node: BranchNode, next_: str, states: dict[str, Any], inherited: dict[str, Any]) -> str:
        choice: dict[str, Any] = {"Type": "Choice", "Choices": []}
        for value, case in node.cases.items():
            out = f"{case.id}.Chosen"
            states[out] = {
                "Type": "Pass",
                "InputPath": f"$.nodes.{self.alias[case.id]}",
                "ResultPath": f"$.nodes.{node.id}",
                "Next": next_,
            }
            choice["Choices"].append(
                {**self.case_rule(node.on, value), "Next": self.node(case, out, states, inherited)}
            )
        if node.default is not None:
            out = f"{node.default.id}.Chosen"
            states[out] = {
                "Type": "Pass",
                "InputPath": f"$.nodes.{self.alias[node.default.id]}",
                "ResultPath": f"$.nodes.{node.id}",
                "Next": next_,
            }
            choice["Default"] = self.node(node.default, out, states, inherited)
        else:
            states[f"{node.id}.None"] = {
                "Type": "Pass",
                "Result": {"output": None},
                "ResultPath": f"$.nodes.{node.id}",
                "Next": next_,
            }
            choice["Default"] = f"{node.id}.None"
        states[node.id] = choice
        return str(node.id)


def _renamed(sub: dict[str, Any], suffix: str) -> dict[str, Any]:
    """A copy of a sub-machine whose every state name (and every reference to one) has `suffix`:
    state names are unique across a whole state machine."""
    names: set[str] = set()

    def collect(machine: dict[str, Any]) -> None:
        for name, state in machine["States"].items():
            names.add(name)
            for inner in state.get("Branches", []):
                collect(inner)
            if "ItemProcessor" in state:
                collect(state["ItemProcessor"])

    collect(sub)

    def rename(value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                k2 = k + suffix if key == "States" and k in names else k
                out[k2] = rename(v, k)
            return out
        if isinstance(value, list):
            return [rename(v, key) for v in value]
        if isinstance(value, str) and key in ("StartAt", "Next", "Default") and value in names:
            return value + suffix
        return value

    return rename(sub)


def compile_definition(root: Any, *, function_arn: str = FUNCTION) -> dict[str, Any]:
    compiler = Compiler(root)
    inner: dict[str, Any] = {
        "Finish": {
            **_call("finish", None),
            "Comment": "End the workflow run succeeded, with the root node's output.",
            "ResultPath": None,
            "End": True,
        }
    }
    start = compiler.node(root, "Finish", inner, {})
    definition: dict[str, Any] = {
        "Comment": "A Stepwise workflow: each agent node is a child run waited on by task token.",
        "StartAt": "Workflow",
        "TimeoutSeconds": WORKFLOW_TIMEOUT,
        "States": {
            "Workflow": {
                "Type": "Parallel",
                "Comment": "One branch, for its Catch: what fails past the nodes' handling fails the run.",
                "Branches": [{"StartAt": start, "States": inner}],
                "ResultPath": None,
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.caught", "Next": "Failed"}],
                "End": True,
            },
            "Failed": {**_call("failed", None), "ResultPath": None, "Next": "WorkflowFailed"},
            "WorkflowFailed": {
                "Type": "Fail",
                "Error": "WorkflowFailed",
                "Cause": "The workflow run's record holds the error.",
            },
        },
    }
    text = json.dumps(definition).replace(json.dumps(FUNCTION), json.dumps(function_arn))
    return json.loads(text)
