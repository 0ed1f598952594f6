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

    head = service.get(tenant_id, workflow_id)
    number = body.version or head.version
    data = service.version_data(tenant_id, workflow_id, number)
    schema = data.get("input_schema")
    if schema:
        _validate_input(schema, body.input)
    suspension.check_request(tenant_id)
    if body.webhook is not None:
        webhook_keys.require(tenant_id)
    run_id = ids.new_id("run")
    run = Run(
        run_id=run_id,
        trigger_id=f"{TRIGGER}{workflow_id}@{number}",
        replay_of=replay_of.run_id if replay_of else None,
        agent_id=workflow_id,
        session_id=ids.derived_id("ses", utcnow(), run_id, "workflow"),
        user_id=body.user_id,
        status="queued",
        input=json.dumps(body.input, separators=(",", ":")),
        max_steps=1,
        tools_executed=[],
        webhook=body.webhook,
        created_at=utcnow(),
    )
    runs = stores().runs
    runs.create(tenant_id, run)
    origin = (replay_of.metadata.get("origin") if replay_of else None) or (
        replay_of.run_id if replay_of else run_id
    )
    ctx = {
        "tenant_id": tenant_id,
        "run_id": run_id,
        "workflow_id": workflow_id,
        "version": number,
        "origin": origin,
        "replay_of": replay_of.run_id if replay_of else None,
    }
    state = {"ctx": ctx, "input": body.input, "nodes": {}, "iter": {}, "at": ""}
    try:
        aws.client("stepfunctions").start_execution(
            stateMachineArn=data["state_machine_arn"], name=run_id, input=json.dumps(state)
        )
    except Exception:
        runs.transition(
            tenant_id,
            run_id,
            "failed",
            allowed_from={"queued"},
            error={"code": "start_failed", "message": "the workflow's execution could not be started"},
        )
        raise
    runs.transition(tenant_id, run_id, "running", allowed_from={"queued"})
    events.emit(
        tenant_id,
        run_id,
        "run_started",
        {"workflow_id": workflow_id, "version": number, "replay_of": ctx["replay_of"]},
    )
    return WorkflowRunAccepted(run_id=run_id, workflow_id=workflow_id, version=number, status="running")


def _validate_input(schema: dict[str, Any], value: Any) -> None:
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
