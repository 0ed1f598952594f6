"""The tasks of a workflow run's state machine, run by the workflow-node Lambda (WorkflowFunction).

A workflow run is a run record (`kind: "workflow"`, `trigger: "workflow"`, started by
stepwise.workflows.starting) whose execution is its version's state machine.

The record: `agent_id` is the workflow's id (so `GET /v1/runs?agent_id=<workflow_id>` lists its runs),
`trigger_id` is `workflow:<workflow_id>@<version>` (a replay keeps it), the input is the JSON input,
the output the root node's output. It has no session of its own. Its node runs are children:
`parent_run_id` and `root_run_id` are the workflow run, their trigger `workflow-node:<origin>/<key>`
(the origin is the first run of a replay chain, so effects keyed on a node's trigger happen once
across replays), their ids derived from the workflow run, the node's key and the attempt, so a
retried task finds the run it started. The workflow run's context lists the children and sums what
they spent (`total_usage`). Node records (stepwise.workflows.store) say which child ran each node and
how it ended: a replay reuses the succeeded ones.

A node's key is its id, the map indexes it runs under (`/0/2`) and the loop iterations
(`@loop=1`): unique per execution of the node."""

from __future__ import annotations

import contextlib
import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

from stepwise.core import aws, ids, tracing
from stepwise.core.errors import Conflict, NotFound, RunStateError, StepError
from stepwise.core.schema import utcnow
from stepwise.llm.models import Usage
from stepwise.runs import events
from stepwise.runs.models import Run, RunCreate, RunError
from stepwise.runs.ports import stores
from stepwise.workflows import checks, expressions, service, store
from stepwise.workflows.models import (
    AgentNode,
    ApprovalNode,
    Definition,
    walk,
)

INLINE_LIMIT = 32_768  # bytes of JSON a node output may take in the state (256 KB for the whole of it)
TRIGGER = "workflow:"
NODE_TRIGGER = "workflow-node:"
REPAIR = (
    "Your answer was not valid: {problem}. Answer again with only a JSON value that validates against "
    "this JSON Schema, nothing else:\n{schema}"
)


class NodeFailed(StepError):
    """A node failed with `on_error: fail`: the workflow fails on outward (Catch, or its end)."""


class WorkflowRepair(StepError):
    """An agent's answer did not validate against its node's output schema: one repair turn follows."""


class WorkflowEnded(StepError):
    """The workflow run ended (cancelled) while its execution went on: nothing more starts."""


# --- The state machine's tasks -----------------------------------------------------------------------


@lru_cache(maxsize=64)
def _definition(tenant_id: str, workflow_id: str, version: int) -> tuple[dict[str, Any], dict[str, str]]:
    """A version's nodes by id and its output aliases (versions never change: cached per process)."""
    data = service.version_data(tenant_id, workflow_id, version)
    root = Definition.model_validate(
        {k: data[k] for k in ("name", "root", "description", "input_schema") if k in data}
    ).root
    return {n.id: n for n in walk(root)}, checks.aliases(root)


class Task:
    """One task's view of the execution's data."""

    def __init__(self, event: dict[str, Any]) -> None:
        self.event = event
        self.state: dict[str, Any] = event["state"]
        ctx = self.state["ctx"]
        self.tenant_id: str = ctx["tenant_id"]
        self.run_id: str = ctx["run_id"]
        self.ctx = ctx
        self.nodes, self.alias = _definition(self.tenant_id, ctx["workflow_id"], int(ctx["version"]))
        self.node_id: str | None = event.get("node")

    @property
    def node(self) -> Any:
        return self.nodes[str(self.node_id)]

    @property
    def key(self) -> str:
        loops = ",".join(f"{k}={v.get('n', 0)}" for k, v in sorted((self.state.get("iter") or {}).items()))
        return f"{self.node_id}{self.state.get('at') or ''}" + (f"@{loops}" if loops else "")

    def where(self) -> dict[str, Any]:
        """node_id, iteration (of the innermost loop around it, from 1) and index (in the map around it)."""
        found: dict[str, Any] = {"node_id": self.node_id}
        loops = self.state.get("iter") or {}
        if loops:
            found["iteration"] = max(int(v.get("n", 0)) for v in loops.values()) + 1
        if "index" in self.state:
            found["index"] = self.state["index"]
        return found

    def resolve(self, value: Any) -> Any:
        """A node output kept by reference: its value, from the child run that holds it."""
        if isinstance(value, dict) and set(value) == {"$ref"}:
            ref = str(value["$ref"])
            run_id, _, parse = ref.removeprefix("run:").partition("#")
            output = stores().runs.get(self.tenant_id, run_id).output or ""
            return _parse_json(output) if parse == "json" else output
        return value

    def data(self) -> dict[str, Any]:
        nodes = {k: v for k, v in (self.state.get("nodes") or {}).items()}
        for name, target in self.alias.items():  # a sequential's output is its last node's
            if name != target and target in nodes:
                nodes[name] = nodes[target]
        found = {"input": self.state.get("input"), "nodes": nodes}
        if "item" in self.state:
            found["item"] = self.state["item"]
        return found

    def render(self, template: str) -> str:
        return expressions.render(template, self.data(), self.resolve)

    def workflow_run(self) -> Run:
        return stores().runs.get(self.tenant_id, self.run_id)


def _traced(
    task: Task, started: datetime | None, status: str, error_code: str | None = None, reused: bool = False
) -> None:
    """The node's span (when traces are on: the workflow run is read for its ids)."""
    if not tracing.enabled():
        return
    tracing.node_ended(
        task.tenant_id,
        task.workflow_run(),
        task.key,
        str(task.node_id),
        status,
        start=started or utcnow(),
        error_code=error_code,
        reused=reused,
    )


def _parse_json(text: str) -> Any:
    stripped = text.strip()
    fenced = re.match(r"^```(?:json)?\s*(.*?)\s*```$", stripped, re.S)
    return json.loads(fenced.group(1) if fenced else stripped)


def _update_context(
    tenant_id: str, run_id: str, child: str | None = None, usage: Usage | None = None
) -> None:
    """Add a child, or what one spent, to the workflow run's context (children run concurrently: the
    context's version check makes each write re-read and try again)."""
    contexts = stores().run_context
    for _ in range(50):
        context = contexts.load(tenant_id, run_id)
        if context.ended:
            return
        changes: dict[str, Any] = {"prepared": True}
        if child is not None:
            if child in context.children:
                return
            changes["children"] = [*context.children, child]
        if usage is not None:
            changes["descendants_usage"] = context.descendants_usage + usage
        try:
            contexts.save(tenant_id, run_id, context.model_copy(update=changes))
            return
        except RunStateError:
            continue


def _send(token: str, output: dict[str, Any]) -> None:
    aws.client("stepfunctions").send_task_success(taskToken=token, output=json.dumps(output))


def start_node(event: dict[str, Any]) -> None:
    """An agent node: its child run, carrying the task token (or, in a replay, the succeeded child of
    the run it replays, whose token goes straight back)."""
    task = Task(event)
    node: AgentNode = task.node
    workflow = task.workflow_run()
    if workflow.done:
        raise WorkflowEnded(f"the workflow run {workflow.run_id} is {workflow.status}")
    token, attempt, key = str(event["token"]), int(event.get("attempt") or 0), task.key
    at = utcnow()
    replay_of = task.ctx.get("replay_of")
    if replay_of and attempt == 0:
        before = store.node(task.tenant_id, replay_of, key)
        if before is not None and before.status == "succeeded":
            data = {**dict(before.data), "reused_from": replay_of}
            store.put_node(task.tenant_id, task.run_id, key, data, "succeeded", at)
            events.emit(
                task.tenant_id,
                task.run_id,
                "node_started",
                {**task.where(), "child_run_id": data["child_run_id"], "reused": True},
            )
            _send(token, {"run_id": data["child_run_id"], "status": "succeeded", "reused": True})
            return
    child_id = ids.derived_id("run", workflow.created_at, workflow.run_id, key, str(attempt))
    message = task.render(node.input)
    if node.output_schema is not None:
        message += (
            "\n\nAnswer with only a JSON value that validates against this JSON Schema, nothing else:\n"
            + json.dumps(node.output_schema)
        )
    origin = task.ctx.get("origin") or workflow.run_id
    store.put_node(
        task.tenant_id,
        task.run_id,
        key,
        {"node_id": node.id, "child_run_id": child_id, "attempt": attempt, **task.where()},
        "running",
        at,
    )
    _update_context(task.tenant_id, task.run_id, child=child_id)
    child = _record_child(
        task.tenant_id, workflow, node.agent_id, child_id, message, f"{NODE_TRIGGER}{origin}/{key}", token
    )
    events.emit(
        task.tenant_id,
        task.run_id,
        "node_started",
        {**task.where(), "child_run_id": child.run_id, "attempt": attempt},
    )
    if child.status == "queued":
        from stepwise.runs.queue import launch

        launch(task.tenant_id, child)


def _record_child(
    tenant_id: str, workflow: Run, agent_id: str, run_id: str, message: str, trigger: str, token: str
) -> Run:
    """The node's run in a fresh session, a child of the workflow run, recorded once."""
    from stepwise.runs.models import RunExists

    runs = stores().runs
    with contextlib.suppress(NotFound):
        return runs.get(tenant_id, run_id)  # a retried task: recorded before
    agent = stores().agents.get(tenant_id, agent_id)
    session_id = ids.derived_id("ses", workflow.created_at, run_id, "session")
    child = Run(
        run_id=run_id,
        trigger_id=trigger,
        agent_id=agent_id,
        session_id=session_id,
        user_id=workflow.user_id,
        status="queued",
        input=message,
        max_steps=agent.max_steps or 10,
        max_tokens_budget=agent.max_tokens_budget,
        tools_executed=[],
        created_at=utcnow(),
        parent_run_id=workflow.run_id,
        root_run_id=workflow.root_run_id or workflow.run_id,
        depth=workflow.depth + 1,
        callback_token=token,
    )
    runs.check_fits(tenant_id, child)
    stores().sessions.create(tenant_id, session_id, agent_id, active_run_id=run_id, user_id=workflow.user_id)
    try:
        return runs.create(tenant_id, child)
    except RunExists:
        return runs.get(tenant_id, run_id)


def _output(task: Task, child: Run, node: AgentNode) -> Any:
    """The child's answer as the node's output: parsed and validated with an output schema (a
    WorkflowRepair once, then `output_invalid`), else the text."""
    text = child.output or ""
    if node.output_schema is None:
        return text
    from jsonschema import Draft202012Validator

    try:
        value = _parse_json(text)
        problems = [e.message for e in Draft202012Validator(node.output_schema).iter_errors(value)]
    except ValueError as exc:
        problems = [f"not JSON ({exc})"]
    if not problems:
        return value
    record = store.node(task.tenant_id, task.run_id, task.key)
    repaired = record is not None and record.data.get("repair_run_id")
    if not repaired:
        raise WorkflowRepair(problems[0])
    raise NodeFailed(
        json.dumps(
            {
                "code": "output_invalid",
                "message": f"the answer does not match the output schema: {problems[0]}",
            }
        )
    )


def node_done(event: dict[str, Any]) -> dict[str, Any]:
    task = Task(event)
    node = task.node
    last = task.state.get("last") or {}
    child = stores().runs.get(task.tenant_id, str(last["run_id"]))
    record = store.node(task.tenant_id, task.run_id, task.key)
    data = dict(record.data) if record is not None else {"node_id": node.id, "child_run_id": child.run_id}
    if not last.get("reused"):
        _update_context(task.tenant_id, task.run_id, usage=child.total_usage)
    if (
        child.status != "succeeded"
    ):  # a repair run that failed: the task token came back as success only on success
        raise NodeFailed(
            json.dumps(
                {
                    "code": (child.error.code if child.error else child.status),
                    "message": child.error.message if child.error else "",
                }
            )
        )
    value = _output(task, child, node)
    size = len(json.dumps(value).encode())
    output = (
        value
        if size <= INLINE_LIMIT
        else {"$ref": f"run:{child.run_id}" + ("#json" if node.output_schema else "")}
    )
    data.update(output_run_id=child.run_id, output_bytes=size)
    store.put_node(task.tenant_id, task.run_id, task.key, data, "succeeded", utcnow())
    _traced(task, record.created_at if record else None, "succeeded", reused=bool(last.get("reused")))
    events.emit(
        task.tenant_id,
        task.run_id,
        "node_completed",
        {**task.where(), "child_run_id": child.run_id, "reused": bool(last.get("reused"))},
    )
    return {"output": output}


def repair_node(event: dict[str, Any]) -> None:
    """One more turn on the child's session, asking for an answer that validates."""
    from stepwise.runs.start import start_run

    task = Task(event)
    node: AgentNode = task.node
    first = stores().runs.get(task.tenant_id, str((task.state.get("last") or {})["run_id"]))
    problem = str((task.state.get("caught") or {}).get("Cause") or "it did not validate")
    with contextlib.suppress(ValueError, TypeError):
        problem = str(json.loads(problem).get("errorMessage") or problem)
    repair_id = ids.derived_id("run", first.created_at, first.run_id, "repair")
    record = store.node(task.tenant_id, task.run_id, task.key)
    data = {**(dict(record.data) if record else {}), "repair_run_id": repair_id}
    store.put_node(task.tenant_id, task.run_id, task.key, data, "running", utcnow())
    _update_context(task.tenant_id, task.run_id, child=repair_id)
    body = RunCreate(
        message=REPAIR.format(problem=problem[:500], schema=json.dumps(node.output_schema)),
        session_id=first.session_id,
    )
    from stepwise.runs.models import RunExists

    with contextlib.suppress(RunExists):
        start_run(
            task.tenant_id,
            node.agent_id,
            body,
            run_id=repair_id,
            trigger_id=f"{first.trigger_id}/repair",
            callback_token=str(event["token"]),
        )


def _approval_id(task: Task, workflow: Run) -> str:
    """Derived from the run and the node's key: a retried task finds the interaction it made."""
    base = ids.derived_id("int", workflow.created_at, workflow.run_id, task.key)[4:]
    return f"int_{base}_0_0"


def start_approval(event: dict[str, Any]) -> None:
    """An approval node: a human gate on the same interactions, links and channels as tool approvals.
    Its answer (`{approved, reason}`) comes back on the task token."""
    from stepwise.approvals import notify
    from stepwise.interactions.models import NewInteraction, digest

    task = Task(event)
    node: ApprovalNode = task.node
    workflow = task.workflow_run()
    if workflow.done:
        raise WorkflowEnded(f"the workflow run {workflow.run_id} is {workflow.status}")
    arguments = {"prompt": task.render(node.prompt)}
    channels: list[dict[str, Any]] = []
    if node.approvers and node.approvers.email:
        channels.append({"type": "email", "to": node.approvers.email})
    if node.approvers and node.approvers.slack:
        channels.append({"type": "slack", "webhook_url": node.approvers.slack})
    interactions = stores().interactions
    new = NewInteraction(
        interaction_id=_approval_id(task, workflow),
        run_id=workflow.run_id,
        session_id=workflow.session_id,
        listed_session_id=workflow.root_session_id,  # a workflow tool's: listed in its caller's root session
        agent_id=workflow.agent_id,  # the workflow's id: the approval page names the workflow
        kind="approval",
        step=0,
        tool_call_id=f"node:{task.key}",
        tool_call_index=0,
        tool_name=str(node.id),
        arguments=arguments,
        digest=digest(task.tenant_id, str(node.id), arguments),
        timeout_seconds=int(node.timeout_seconds or 24 * 3600),
        channels=channels or None,
    )
    interaction = interactions.create(task.tenant_id, new)
    interaction = interactions.attach_token(task.tenant_id, interaction.interaction_id, str(event["token"]))
    store.put_node(
        task.tenant_id,
        task.run_id,
        task.key,
        {"node_id": node.id, "interaction_id": interaction.interaction_id, **task.where()},
        "running",
        utcnow(),
    )
    url = notify.approval_link(task.tenant_id, interaction)
    data = {
        "interaction_id": interaction.interaction_id,
        "tool_call_id": interaction.tool_call_id,
        "tool_name": interaction.tool_name,
        "arguments": arguments,
        "approval_url": url,
        "expires_at": interaction.deadline.isoformat(),
    }
    events.emit(task.tenant_id, task.run_id, "node_started", task.where())
    events.emit(task.tenant_id, task.run_id, "approval_requested", data)
    if workflow.root_run_id:  # a workflow tool's run: the gate shows in the stream the app watches too
        events.emit(
            task.tenant_id, workflow.root_run_id, "approval_requested", {**data, "run_id": task.run_id}
        )
    if interaction.status == "answered":  # answered before the token was stored
        from stepwise.runs import answers

        answers.deliver(task.tenant_id, interaction.interaction_id)
        return
    stores().runs.transition(task.tenant_id, task.run_id, "waiting", allowed_from={"running", "waiting"})
    notify.tell_humans(interaction, url, agent_name=f"workflow {workflow.agent_id}")


def approval_done(event: dict[str, Any]) -> dict[str, Any]:
    task = Task(event)
    answer = task.state.get("last") or {}
    stores().runs.transition(task.tenant_id, task.run_id, "running", allowed_from={"waiting"})
    approved = bool(answer.get("approved"))
    decision = {"approved": approved, "reason": answer.get("reason")}
    if not approved:
        raise NodeFailed(
            json.dumps(
                {"code": "rejected", "message": str(answer.get("reason") or "the approval was rejected")}
            )
        )
    record = store.node(task.tenant_id, task.run_id, task.key)
    store.put_node(
        task.tenant_id,
        task.run_id,
        task.key,
        {**(dict(record.data) if record else {}), **decision},
        "succeeded",
        utcnow(),
    )
    _traced(task, record.created_at if record else None, "succeeded")
    events.emit(task.tenant_id, task.run_id, "node_completed", task.where())
    return {"output": decision}


def node_failed(event: dict[str, Any]) -> dict[str, Any]:
    """A node that failed (its run failed, its wait timed out, its answer did not validate, its
    approval was rejected): stop what it still runs, record `node_failed`, then go on with a null
    output (`on_error: continue`) or fail on."""
    task = Task(event)
    node = task.node
    error = _error_of(task.state.get("caught") or {})
    record = store.node(task.tenant_id, task.run_id, task.key)
    if record is not None and record.status == "running":
        for field in ("repair_run_id", "child_run_id"):
            child_id = record.data.get(field)
            if child_id:
                _stop_child(task.tenant_id, str(child_id), error)
                with contextlib.suppress(NotFound):
                    _update_context(
                        task.tenant_id,
                        task.run_id,
                        usage=stores().runs.get(task.tenant_id, str(child_id)).total_usage,
                    )
        if record.data.get("interaction_id"):  # an approval that timed out: its links now answer 410
            stores().interactions.close(task.tenant_id, str(record.data["interaction_id"]), "expired")
            stores().runs.transition(task.tenant_id, task.run_id, "running", allowed_from={"waiting"})
        store.set_node(
            task.tenant_id, task.run_id, task.key, "failed", {**dict(record.data), "error": error}, utcnow()
        )
    events.emit(task.tenant_id, task.run_id, "node_failed", {**task.where(), "error": error})
    _traced(task, record.created_at if record else None, "failed", error_code=error["code"])
    if node.on_error == "continue":
        return {"output": None, "error": error}
    raise NodeFailed(json.dumps({**error, "node_id": node.id}))


def _stop_child(tenant_id: str, run_id: str, error: dict[str, Any]) -> None:
    from stepwise.runs.ending import end_run
    from stepwise.runs.queue import stop

    with contextlib.suppress(NotFound, Conflict):
        if stores().runs.get(tenant_id, run_id).done:
            return
        stop(run_id, error["message"])
        end_run(
            tenant_id,
            run_id,
            "timed_out" if error["code"] == "timed_out" else "cancelled",
            error=RunError(code=error["code"], message=error["message"]),
        )


def _error_of(caught: dict[str, Any]) -> dict[str, Any]:
    """What Step Functions caught, as {code, message}: a run's failure, a timeout, a node failure."""
    kind, cause = str(caught.get("Error") or "Failed"), caught.get("Cause") or ""
    if kind == "States.Timeout":
        return {"code": "timed_out", "message": "the node did not finish within its timeout_seconds"}
    detail: Any = cause
    with contextlib.suppress(ValueError, TypeError):
        detail = json.loads(cause)
    if isinstance(detail, dict) and "errorMessage" in detail:  # a Lambda's error: its message is ours
        with contextlib.suppress(ValueError, TypeError):
            detail = json.loads(detail["errorMessage"])
    if isinstance(detail, dict) and "code" in detail:
        return {"code": str(detail["code"]), "message": str(detail.get("message") or "")}
    return {"code": "node_failed", "message": f"{kind}: {str(detail)[:500]}"}


def finish(event: dict[str, Any]) -> None:
    from stepwise.runs.ending import end_run

    task = Task(event)
    root = next(iter(task.nodes))
    entry = (task.data()["nodes"].get(root) or {}).get("output")
    value = task.resolve(entry)
    output = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    end_run(task.tenant_id, task.run_id, "succeeded", output=output)


def failed(event: dict[str, Any]) -> None:
    from stepwise.runs.ending import end_run

    task = Task(event)
    error = _error_of(task.state.get("caught") or {})
    end_run(
        task.tenant_id, task.run_id, "failed", error=RunError(code=error["code"], message=error["message"])
    )


ACTIONS = {
    "start_node": start_node,
    "node_done": node_done,
    "repair_node": repair_node,
    "node_failed": node_failed,
    "start_approval": start_approval,
    "approval_done": approval_done,
    "finish": finish,
    "failed": failed,
}


def handle(event: dict[str, Any]) -> dict[str, Any] | None:
    action = ACTIONS.get(str(event.get("action")))
    if action is None:
        raise ValueError(f"unknown workflow action {event.get('action')!r}")
    result: dict[str, Any] | None = action(event)
    return result
