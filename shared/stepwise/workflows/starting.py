"""Starting workflow runs and resuming failed ones (the API's side; the state machine's tasks are
stepwise.workflows.running). See running's docstring for the run record and its children."""

from __future__ import annotations

import json
from typing import Any

from stepwise.core import aws, ids
from stepwise.core.errors import Conflict, Unprocessable
from stepwise.core.schema import utcnow
from stepwise.runs import events
from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.workflows import service
from stepwise.workflows.models import WorkflowRunAccepted, WorkflowRunCreate

TRIGGER = "workflow:"


def start(
    tenant_id: str, workflow_id: str, body: WorkflowRunCreate, *, replay_of: Run | None = None
) -> WorkflowRunAccepted:
    """`POST /v1/workflows/{id}/runs`: record the run, then start its execution (named after it)."""
    from stepwise.runs import suspension
    from stepwise.webhooks import keys as webhook_keys

    suspension.check_request(tenant_id)
    if body.webhook is not None:
        webhook_keys.require(tenant_id)
    run = record(tenant_id, workflow_id, body, run_id=ids.new_id("run"), replay_of=replay_of)
    launch(tenant_id, run)
    number = run.workflow_ref[1]
    return WorkflowRunAccepted(run_id=run.run_id, workflow_id=workflow_id, version=number, status="running")


def record(
    tenant_id: str,
    workflow_id: str,
    body: WorkflowRunCreate,
    *,
    run_id: str,
    replay_of: Run | None = None,
    parent: Run | None = None,
    parent_interaction_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Run:
    """The workflow run, queued, on `body.version` (else the latest): its input checked against the
    version's input_schema. With `parent`, it is that run's child (a workflow tool's call, whose wait
    `parent_interaction_id` is), in its tree like a delegated run."""
    head = service.get(tenant_id, workflow_id)
    number = body.version or head.version
    data = service.version_data(tenant_id, workflow_id, number)
    schema = data.get("input_schema")
    if schema:
        check_input(schema, body.input)
    at = utcnow()
    # A replay's nodes are keyed on the first run of its chain (see stepwise.workflows.running).
    origin = (replay_of.metadata.get("origin") or replay_of.run_id) if replay_of else None
    tree: dict[str, Any] = {}
    if parent is not None:
        from stepwise.runs.delegation import tree_budgets

        tree = {
            "parent_run_id": parent.run_id,
            "root_run_id": parent.root_run_id or parent.run_id,
            "depth": parent.depth + 1,
            "parent_interaction_id": parent_interaction_id,
            "root_session_id": parent.root_session_id or parent.session_id,
            "tree_budgets": tree_budgets(parent),
        }
    run = Run(
        run_id=run_id,
        trigger_id=f"{TRIGGER}{workflow_id}@{number}",
        replay_of=replay_of.run_id if replay_of else None,
        agent_id=workflow_id,
        session_id=ids.derived_id("ses", at, run_id, "workflow"),
        user_id=body.user_id,
        status="queued",
        input=json.dumps(body.input, separators=(",", ":")),
        max_steps=1,
        tools_executed=[],
        webhook=body.webhook,
        metadata={**(metadata or {}), **({"origin": origin} if origin else {})},
        created_at=at,
        **tree,
    )
    return stores().runs.create(tenant_id, run)


def launch(tenant_id: str, run: Run) -> None:
    """Start the recorded run's execution on its version's state machine, once (named after the run):
    a start that fails ends the run `failed` (StartFailed)."""
    from stepwise.runs.queue import StartFailed

    workflow_id, number = run.workflow_ref
    runs = stores().runs
    ctx = {
        "tenant_id": tenant_id,
        "run_id": run.run_id,
        "workflow_id": workflow_id,
        "version": number,
        "origin": run.metadata.get("origin") or run.run_id,
        "replay_of": run.replay_of,
    }
    state = {"ctx": ctx, "input": json.loads(run.input), "nodes": {}, "iter": {}, "at": ""}
    sfn = aws.client("stepfunctions")
    try:
        arn = service.version_data(tenant_id, workflow_id, number)["state_machine_arn"]
        sfn.start_execution(stateMachineArn=arn, name=run.run_id, input=json.dumps(state))
    except sfn.exceptions.ExecutionAlreadyExists:
        pass  # a retried start: the execution is there already
    except Exception as exc:
        runs.transition(
            tenant_id,
            run.run_id,
            "failed",
            allowed_from={"queued"},
            error={"code": "start_failed", "message": "the workflow's execution could not be started"},
        )
        raise StartFailed("the workflow run could not be started; it is recorded as failed") from exc
    runs.transition(tenant_id, run.run_id, "running", allowed_from={"queued"})
    events.emit(
        tenant_id,
        run.run_id,
        "run_started",
        {"workflow_id": workflow_id, "version": number, "replay_of": run.replay_of},
    )


def check_input(schema: dict[str, Any], value: Any) -> None:
    """422 `input_invalid` with each problem by location, for an input its schema refuses."""
    from jsonschema import Draft202012Validator

    problems = [
        {"loc": list(e.absolute_path), "msg": e.message}
        for e in Draft202012Validator(schema).iter_errors(value)
    ]
    if problems:
        raise Unprocessable(
            "the input does not match the workflow's input_schema", code="input_invalid", details=problems
        )


def replay(tenant_id: str, run: Run) -> WorkflowRunAccepted:
    """A failed (or cancelled, timed out) workflow run again, on the same version: nodes that succeeded
    are not run again (their outputs are reused), the first one that did not runs anew."""
    if run.kind != "workflow":
        raise Unprocessable("not a workflow run", code="not_a_workflow_run")
    if run.status == "succeeded":
        raise Conflict("the workflow run succeeded; there is nothing to resume", code="replay_unsafe")
    if not run.done:
        raise Conflict("the workflow run is still active", code="run_active")
    workflow_id, number = run.workflow_ref
    body = WorkflowRunCreate(
        input=json.loads(run.input), version=number, user_id=run.user_id, webhook=run.webhook
    )
    return start(tenant_id, workflow_id, body, replay_of=run)


def replay_any(tenant_id: str, run_id: str, *, force: bool) -> dict[str, Any]:
    """`POST /v1/runs/{run_id}/replay`: a workflow run resumes (above); any other run replays as
    stepwise.runs.replay does. The answer is the same shape either way."""
    from stepwise.runs import replay as runs_replay
    from stepwise.runs.start import accepted

    found = stores().runs.get(tenant_id, run_id)
    if found.kind == "workflow":
        resumed = replay(tenant_id, found)
        new_run = stores().runs.get(tenant_id, resumed.run_id)
        return {
            "run_id": new_run.run_id,
            "session_id": new_run.session_id,
            "status": new_run.status,
            "attachments": [],
            "replay_of": run_id,
        }
    new = runs_replay.replay(tenant_id, run_id, force=force)
    return {**accepted(new), "replay_of": new.replay_of}
