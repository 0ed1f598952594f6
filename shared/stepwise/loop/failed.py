"""Failed: every state's Catch leads here. The run ends failed with what was caught, as its
{code, message}."""

from __future__ import annotations

import json

from stepwise.runs.ending import end_run
from stepwise.runs.state import FailedState, RunState, StepFailure, describe_failure


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
