"""The run's first and last states: Prepare, Finalize and Failed of agent_run.asl.json."""

from __future__ import annotations

import json

from stepwise import events, observability
from stepwise.errors import HookDenied, NotFound, RunStateError, step_error_code
from stepwise.hooks.run import fire
from stepwise.models import ACTIVE_STATUSES, Agent, FailedState, RunError, RunState, StepFailure
from stepwise.start import start_next
from stepwise.store import agents, runs, sessions
from stepwise.store.sessions import USER_SLOT


def prepare(state: RunState) -> RunState:
    """Mark the run running and put its user message into the session."""
    run = runs.get(state.tenant_id, state.run_id)
    observability.bind_run(run)
    agent = agents.get_for_run(state.tenant_id, run.agent_id)  # a deleted agent fails the run here
    if run.status == "queued":
        decision = fire(state.tenant_id, run.run_id, agent, "OnRunStart", arguments={"message": run.input})
        if decision.action == "deny":
            raise HookDenied(decision.message or "an OnRunStart hook refused this run")
    started = runs.transition(
        state.tenant_id, state.run_id, "running", allowed_from={"queued"}, tools_executed=[]
    )
    if not started and run.status != "running":  # "running" already: a retry of this state
        raise RunStateError(f"run {state.run_id} is {run.status}; it cannot start")
    sessions.put_message(
        state.tenant_id, run.session_id, run.run_id, 0, USER_SLOT, {"role": "user", "content": run.input}
    )
    if started:
        events.emit(
            state.tenant_id,
            state.run_id,
            "run_started",
            {"agent_id": run.agent_id, "session_id": run.session_id, "max_steps": run.max_steps},
        )
    return RunState(tenant_id=state.tenant_id, run_id=state.run_id, step=0, max_steps=run.max_steps)


def last_answer(tenant_id: str, session_id: str, run_id: str) -> str | None:
    for message in reversed(sessions.messages(tenant_id, session_id, {run_id})):
        if message.get("role") == "assistant" and message.get("content"):
            return str(message["content"])
    return None


BLOCKED_ANSWER = "The answer was withheld by a policy hook: {message}"


def finalize(state: RunState) -> RunState:
    """PreResponse hooks, then persist the answer, mark the run succeeded and add it to the session."""
    run = runs.get(state.tenant_id, state.run_id)
    observability.bind_run(run)
    agent = agents.get_for_run(state.tenant_id, run.agent_id)
    output = last_answer(state.tenant_id, run.session_id, run.run_id) or ""
    decision = fire(state.tenant_id, run.run_id, agent, "PreResponse", output=output)
    if decision.action == "deny":
        output = BLOCKED_ANSWER.format(message=decision.message or "no reason given")
    elif decision.modified_output is not None:
        output = str(decision.modified_output)
    if runs.transition(state.tenant_id, state.run_id, "succeeded", allowed_from={"running"}, output=output):
        observability.run_succeeded()
        sessions.complete_run(state.tenant_id, run.session_id, run.run_id)
        start_next(state.tenant_id, run.session_id, run.run_id)
        events.emit(
            state.tenant_id,
            state.run_id,
            "run_completed",
            {"output": output, "steps": run.steps, "usage": run.usage.model_dump()},
        )
        _on_run_complete(state.tenant_id, run.run_id, agent, "succeeded", output)
    return state


def _on_run_complete(tenant_id: str, run_id: str, agent: Agent, status: str, output: str | None) -> None:
    """Fire and forget: the run is already final, so nothing a hook says or does can change it."""
    if agent.hooks:
        fire(tenant_id, run_id, agent, "OnRunComplete", arguments={"status": status}, output=output)


def describe_failure(failure: StepFailure) -> RunError:
    """Turn what Step Functions caught into the run's {code, message}.

    A Lambda error's Cause is the JSON of {errorType, errorMessage}; our step errors carry a `code`.
    """
    message = failure.Cause or failure.Error
    error_type = failure.Error
    try:
        cause = json.loads(failure.Cause or "")
        if isinstance(cause, dict):
            message = str(cause.get("errorMessage") or message)
            error_type = str(cause.get("errorType") or error_type)
    except ValueError:
        pass
    code = step_error_code(error_type)
    if code is None and error_type.startswith("States."):
        code = error_type.removeprefix("States.").lower()  # e.g. States.Timeout -> timeout
    return RunError(code=code or "internal_error", message=message[:2000])


def fail(state: FailedState) -> RunState:
    """Record why the run failed (every state's Catch leads here)."""
    error = describe_failure(state.error)
    if runs.transition(
        state.tenant_id, state.run_id, "failed", allowed_from=ACTIVE_STATUSES, error=error.model_dump()
    ):
        events.emit(state.tenant_id, state.run_id, "run_failed", {"error": error.model_dump()})
        run = runs.get(state.tenant_id, state.run_id)
        observability.bind_run(run)
        observability.run_failed(error.code)
        start_next(state.tenant_id, run.session_id, run.run_id)
        try:
            agent = agents.get(state.tenant_id, run.agent_id)
        except NotFound:
            return _done(state)
        _on_run_complete(state.tenant_id, run.run_id, agent, "failed", None)
    return _done(state)


def _done(state: RunState) -> RunState:
    return RunState(
        tenant_id=state.tenant_id, run_id=state.run_id, step=state.step, max_steps=state.max_steps
    )
