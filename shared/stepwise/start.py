"""Starting runs: the record first, then the execution, whose name is the run id so a retried start can
never create a second execution for the same run."""

from __future__ import annotations

import json
from typing import Any

from stepwise import aws, config
from stepwise.errors import Conflict, Unavailable
from stepwise.ids import new_id
from stepwise.models import DEFAULT_MAX_STEPS, Agent, Run, RunCreate, RunState, Session, SyncRunCreate, utcnow
from stepwise.store import agents, runs, sessions


class StartFailed(Unavailable):
    code = "start_failed"


def _session_for(tenant_id: str, agent_id: str, session_id: str | None) -> Session:
    if session_id is None:
        return sessions.create(tenant_id, new_id("ses"), agent_id)
    session = sessions.get(tenant_id, session_id)
    if session.agent_id != agent_id:
        raise Conflict(
            f"session {session_id} belongs to another agent; start a new session for this one",
            code="session_agent_mismatch",
        )
    return session


def _record(
    tenant_id: str,
    agent: Agent,
    body: RunCreate | SyncRunCreate,
    max_steps: int,
    *,
    run_id: str | None = None,
    trigger_id: str | None = None,
    replay_of: str | None = None,
) -> Run:
    budget = getattr(body, "max_tokens_budget", None) or agent.max_tokens_budget
    if run_id is not None and runs.exists(tenant_id, run_id):
        raise runs.RunExists(f"run {run_id} exists already", code="run_exists")
    session = _session_for(tenant_id, agent.agent_id, body.session_id)
    run_id = run_id or new_id("run")
    run = Run(
        run_id=run_id,
        trigger_id=trigger_id or run_id,
        replay_of=replay_of,
        agent_id=agent.agent_id,
        session_id=session.session_id,
        status="queued",
        input=body.message,
        max_steps=max_steps,
        max_tokens_budget=budget,
        tools_executed=[],
        metadata=body.metadata,
        script=body.script,
        created_at=utcnow(),
    )
    return runs.create(tenant_id, run)


def start_run(
    tenant_id: str,
    agent_id: str,
    body: RunCreate,
    *,
    run_id: str | None = None,
    trigger_id: str | None = None,
    replay_of: str | None = None,
) -> Run:
    """Record the run, then start its execution (named after the run). A caller that must never
    start the same thing twice (a schedule's delivery, an event) passes a `run_id` derived from it:
    the record's conditional write then refuses the duplicate with RunExists."""
    agent = agents.get(tenant_id, agent_id)
    max_steps = body.max_steps or agent.max_steps or DEFAULT_MAX_STEPS
    run = _record(
        tenant_id, agent, body, max_steps, run_id=run_id, trigger_id=trigger_id, replay_of=replay_of
    )
    state = RunState(tenant_id=tenant_id, run_id=run.run_id, max_steps=run.max_steps)
    sfn = aws.client("stepfunctions")
    try:
        sfn.start_execution(
            stateMachineArn=config.api_targets().state_machine_arn,
            name=run.run_id,
            input=state.model_dump_json(),
        )
    except sfn.exceptions.ExecutionAlreadyExists:
        pass  # this run's execution started already: the start was retried
    except Exception as exc:
        runs.transition(
            tenant_id,
            run.run_id,
            "failed",
            allowed_from={"queued"},
            error={"code": "start_failed", "message": "the run's execution could not be started"},
        )
        raise StartFailed("the run could not be started; it is recorded as failed, try again") from exc
    return run


def run_sync(tenant_id: str, agent_id: str, body: SyncRunCreate) -> Run:
    """One model call without tools, answered in the response. The model step runs in its own function
    (the API never imports the model SDK), invoked synchronously."""
    run = _record(tenant_id, agents.get(tenant_id, agent_id), body, 1)
    payload: dict[str, Any] = {"mode": "sync", "tenant_id": tenant_id, "run_id": run.run_id}
    response = aws.client("lambda").invoke(
        FunctionName=config.api_targets().model_step_function,
        Payload=json.dumps(payload).encode(),
    )
    response["Payload"].read()  # the run record is the answer; a FunctionError shows on it as `error`
    return runs.get(tenant_id, run.run_id)
