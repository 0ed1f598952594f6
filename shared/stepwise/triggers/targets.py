"""Starting a trigger's target: the one place a delivery becomes a run.

A target is an agent (a run with the rendered message, its session, its user, the email's files) or a
workflow (a workflow run whose input is `{message, event}`: the rendered message and the event itself;
the workflow's own input_schema, if any, checks it). Either run's id is the delivery's, so a second
start finds it recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stepwise.attachments import blobs
from stepwise.attachments.models import MAX_ATTACHMENTS, UPLOAD_LIMIT, UploadRef
from stepwise.attachments.sniff import Inspector
from stepwise.core.errors import Conflict, Unprocessable
from stepwise.core.ids import derived_id
from stepwise.core.schema import utcnow
from stepwise.runs.models import RunCreate, RunExists
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
    event: Any = None  # what the templates read (the JSON body, an email's fields): a workflow's input


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
        return _start_workflow(s, s.target.workflow_id)
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


def _start_workflow(s: Start, workflow_id: str) -> str:
    """The workflow's run on `{message, event}`. A run an earlier attempt recorded but never launched
    (it died in between) is launched now; one already launched is RunExists. An email's files are not
    passed (a workflow run takes no attachments)."""
    from stepwise.runs.ports import stores
    from stepwise.workflows import starting
    from stepwise.workflows.models import WorkflowRunCreate

    body = WorkflowRunCreate(input={"message": s.message, "event": s.event}, user_id=s.user_id)
    try:
        run = starting.record(s.tenant_id, workflow_id, body, run_id=s.run_id, metadata=s.metadata)
    except RunExists:
        run = stores().runs.get(s.tenant_id, s.run_id)
        if run.status != "queued":
            raise
    starting.launch(s.tenant_id, run)
    return run.run_id
