"""Starting a trigger's target: the one place a delivery becomes a run.

Today a target is an agent. A workflow target is validated by the model and refused when a trigger is
created or changed (422 `workflow_targets_unavailable`); when workflows merge, `start` is where a
`{workflow_id}` target starts its workflow run, with the same run id, trigger id and metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepwise.core.errors import Conflict, Unprocessable
from stepwise.runs.models import RunCreate
from stepwise.runs.start import start_run
from stepwise.triggers.models import TriggerTarget


@dataclass(frozen=True)
class Start:
    """One delivery's start, as the worker rendered it."""

    tenant_id: str
    target: TriggerTarget
    message: str
    run_id: str  # derived from the trigger and the delivery's dedupe key: a second start is RunExists
    trigger_id: str  # the run's intent key, "<type>:<trigger id>/<dedupe key>"
    session_id: str | None  # a by-key session's id (derived from its key); None: a new session
    user_id: str | None
    metadata: dict[str, Any]


def start(s: Start) -> str:
    """Start the target's run; its run id. Raises RunExists when this delivery's run was started."""
    if s.target.workflow_id is not None:
        raise Unprocessable("workflow targets are not available yet", code="workflow_targets_unavailable")
    agent_id = str(s.target.agent_id)
    body = RunCreate(message=s.message, user_id=s.user_id, metadata=s.metadata)
    if s.session_id is None:
        return start_run(s.tenant_id, agent_id, body, run_id=s.run_id, trigger_id=s.trigger_id).run_id
    try:
        # The key's first delivery names the session it creates.
        run = start_run(
            s.tenant_id, agent_id, body, run_id=s.run_id, trigger_id=s.trigger_id, new_session_id=s.session_id
        )
    except Conflict as exc:
        if exc.code != "session_exists":
            raise
        # A later one continues it (its runs queue behind each other: enqueue).
        continued = body.model_copy(update={"session_id": s.session_id})
        run = start_run(s.tenant_id, agent_id, continued, run_id=s.run_id, trigger_id=s.trigger_id)
    return run.run_id
