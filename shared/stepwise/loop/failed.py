"""Failed: every state's Catch leads here. The run ends failed with what was caught, as its
{code, message}."""

from __future__ import annotations

import json

from stepwise.core.errors import step_error_code
from stepwise.runs.ending import end_run
from stepwise.runs.models import RunError
from stepwise.runs.state import FailedState, RunState, StepFailure


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
    """Record why the run failed, through the one ending every run has."""
    end_run(state.tenant_id, state.run_id, "failed", error=describe_failure(state.error))
    return RunState(tenant_id=state.tenant_id, run_id=state.run_id, step=state.step, action="done")


def fail_with(tenant_id: str, run_id: str, exc: BaseException) -> None:
    """The same ending for an error raised outside the state machine (the sync path)."""
    cause = json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)})
    fail(
        FailedState(
            tenant_id=tenant_id, run_id=run_id, error=StepFailure(Error=type(exc).__name__, Cause=cause)
        )
    )
