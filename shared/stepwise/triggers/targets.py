"""Starting a trigger's target: the one place a delivery becomes a run.

Today a target is an agent. A workflow target is validated by the model and refused when a trigger is
created or changed (422 `workflow_targets_unavailable`); when workflows merge, `start` is where a
`{workflow_id}` target starts its workflow run, with the same run id, trigger id and metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepwise.attachments import blobs
from stepwise.attachments.models import MAX_ATTACHMENTS, UPLOAD_LIMIT, UploadRef
from stepwise.attachments.sniff import Inspector
from stepwise.core.errors import Conflict, Unprocessable
from stepwise.core.ids import derived_id
from stepwise.core.schema import utcnow
from stepwise.runs.models import RunCreate
from stepwise.runs.start import start_run
from stepwise.triggers.mail import Part
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


def uploads(s: Start, files: list[Part]) -> list[UploadRef]:
    """An email's files as uploads the run's start copies under the run (stepwise.attachments.intake):
    the run keeps them whatever becomes of the message. Their ids derive from the run, so a retry
    writes the same keys again. A file of a type runs do not take (a zip, a calendar invite) is left
    out rather than refusing the message, as are files past MAX_ATTACHMENTS or over UPLOAD_LIMIT; the
    event's `attachments` still lists every one."""
    refs: list[UploadRef] = []
    for index, part in enumerate(files):
        if len(refs) == MAX_ATTACHMENTS or len(part.data) > UPLOAD_LIMIT:
            continue
        inspector = Inspector()
        inspector.feed(part.data)
        try:
            content_type = inspector.content_type(part.content_type, part.name)
        except Unprocessable:
            continue
        upload_id = derived_id("upl", utcnow(), "trigger-file", s.run_id, str(index))
        blobs.put_upload(blobs.upload_key(s.tenant_id, upload_id), part.data, content_type, part.name)
        refs.append(UploadRef(upload_id=upload_id))
    return refs


def start(s: Start, files: list[Part] | None = None) -> str:
    """Start the target's run; its run id. Raises RunExists when this delivery's run was started."""
    if s.target.workflow_id is not None:
        raise Unprocessable("workflow targets are not available yet", code="workflow_targets_unavailable")
    agent_id = str(s.target.agent_id)
    attachments = uploads(s, files) if files else []
    body = RunCreate(message=s.message, user_id=s.user_id, metadata=s.metadata, attachments=attachments)
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
