"""The session's queue: starting a run's execution, and handing a session to its next queued run
when one ends. The execution is named after the run, so a retried start never makes a second."""

from __future__ import annotations

import contextlib

from stepwise.core import aws, config, observability
from stepwise.core.errors import Unavailable
from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.runs.state import RunState


class StartFailed(Unavailable):
    code = "start_failed"


def launch(tenant_id: str, run: Run) -> None:
    """Start the run's execution (once: the execution is named after the run)."""
    state = RunState(tenant_id=tenant_id, run_id=run.run_id, max_steps=run.max_steps)
    sfn = aws.client("stepfunctions")
    try:
        sfn.start_execution(
            stateMachineArn=config.machine().state_machine_arn, name=run.run_id, input=state.model_dump_json()
        )
    except sfn.exceptions.ExecutionAlreadyExists:
        pass  # this run's execution started already: the start was retried
    except Exception as exc:
        observability.run_failed("start_failed")
        stores().runs.transition(
            tenant_id,
            run.run_id,
            "failed",
            allowed_from={"queued"},
            error={"code": "start_failed", "message": "the run's execution could not be started"},
        )
        stores().sessions.release(tenant_id, run.session_id, run.run_id)
        raise StartFailed("the run could not be started; it is recorded as failed, try again") from exc
    else:
        observability.run_started(run)


def start_next(tenant_id: str, session_id: str, ended_run_id: str) -> str | None:
    """A run has ended: give its session to the next queued run and start it."""
    next_run_id = stores().sessions.release(tenant_id, session_id, ended_run_id)
    if next_run_id is None:
        return None
    next_run = stores().runs.get(tenant_id, next_run_id)
    if next_run.status == "queued":
        launch(tenant_id, next_run)
        return next_run_id
    return start_next(tenant_id, session_id, next_run_id)  # it was cancelled while queued: skip it


# The error our cancel gives StopExecution: the reconciler recognises its own cancels by it.
CANCELLED_ERROR = "Cancelled"


def stop(run_id: str, reason: str) -> None:
    """Stop the run's execution; a run that never started has none, which is fine."""
    from botocore.exceptions import ClientError

    try:
        aws.client("stepfunctions").stop_execution(
            executionArn=config.machine().execution_arn(run_id), error=CANCELLED_ERROR, cause=reason[:256]
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
            raise


def stop_run(run: Run, reason: str) -> None:
    """Stop the run's execution, wherever it runs: an agent run's on the agent-run machine, a workflow
    run's on its version's state machine (`<prefix>-<workflow_id>-v<n>`, in the agent-run machine's
    account and region)."""
    if run.kind != "workflow":
        stop(run.run_id, reason)
        return
    from botocore.exceptions import ClientError

    workflow_id, version = run.workflow_ref
    base = config.machine().state_machine_arn.rsplit(":", 1)[0].replace(":stateMachine", ":execution", 1)
    arn = f"{base}:{config.workflow_deploy().prefix}-{workflow_id}-v{version}:{run.run_id}"
    with contextlib.suppress(ClientError):  # it ended meanwhile, or never started
        aws.client("stepfunctions").stop_execution(
            executionArn=arn, error=CANCELLED_ERROR, cause=reason[:256]
        )
