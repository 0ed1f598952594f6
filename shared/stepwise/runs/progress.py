"""Where a run stands for a client that is not reading its events: done, waiting on someone, or still
working. The protocol doors (stepwise.protocols) all ask the same two questions, so they are answered
once here: which human waits of the run's tree are open (`pending`), and "wait until the run ends or
needs someone, at most this long" (`settle`).

`settle` rides the event log's long-poll (stepwise.runs.eventlog) instead of polling the run record, so
a waiting client costs what a reader of `GET /v1/runs/{id}/events` costs: the log's small head item per
poll, the run item only when an event says something changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel

from stepwise.interactions.models import Interaction
from stepwise.runs import eventlog
from stepwise.runs.models import TERMINAL_EVENTS, Run, RunEvent
from stepwise.runs.ports import stores

HUMAN_KINDS = frozenset({"approval", "client_tool"})
# The events after which the run may have ended or started to wait on someone.
ANNOUNCEMENTS = frozenset({"approval_requested", "client_tool_requested"})
SIGNALS = TERMINAL_EVENTS | ANNOUNCEMENTS
ANSWERS = frozenset({"approval_decided", "client_tool_answered"})


class Progress(BaseModel):
    run: Run
    pending: list[Interaction]  # the tree's open human waits, oldest first
    next: int  # the event log's seq this answer was read at: a stream resumes after it

    @property
    def settled(self) -> bool:
        """Ended, or waiting on a person or the calling app (not merely on a child run)."""
        return self.run.done or bool(self.pending)


def pending(tenant_id: str, run: Run) -> list[Interaction]:
    """The open approvals and client tools of `run` and its active descendants. A delegation's own
    wait is answered by the child's ending, never by a client, so it is followed, not listed."""
    if run.done or run.status == "queued":
        return []  # a queued run has taken no step: nothing of it can wait on anyone yet
    found: list[Interaction] = []
    # The Step creates the interaction; Await announces it (approval_requested) and only then moves the
    # run to `waiting`. Until then a client reading the log would be told of a wait it cannot see yet,
    # so a run's own waits count from `waiting` on. (A delegating parent stays `running`: its children
    # are looked at whatever its status.)
    if run.status == "waiting":
        for interaction in stores().interactions.for_run(tenant_id, run.run_id, "pending"):
            if interaction.kind in HUMAN_KINDS:
                found.append(interaction)
    for child_id in run.children:
        child = stores().runs.get(tenant_id, child_id)
        found += pending(tenant_id, child)
    return sorted(found, key=lambda i: (i.created_at, i.interaction_id))


def respond_call(interaction: Interaction) -> str:
    """How one of `pending`'s waits is answered over the API, for a door that tells its caller in words
    (an MCP task's status message, a Responses message item): the route and the answer it takes."""
    route = f"POST /v1/sessions/interactions/{interaction.interaction_id}/respond"
    if interaction.kind == "approval":
        answer = '{"answer": {"approved": true|false, "reason"?: "..."}}'
    else:
        answer = (
            f'{{"answer": {{"tool_call_id": "{interaction.tool_call_id}", "outcome": "completed"|"error", '
            '"output": ...}}'
        )
    return f"{route} {answer} with an Idempotency-Key header"


def now(tenant_id: str, run_id: str) -> Progress:
    """The run as it stands (NotFound for an unknown id or another tenant's)."""
    head = stores().events.head(tenant_id, run_id)
    run = stores().runs.get(tenant_id, run_id)
    return Progress(run=run, pending=pending(tenant_id, run), next=head.last_seq if head else 0)


def settle(
    tenant_id: str,
    run_id: str,
    wait: float,
    *,
    ended: bool = False,
    seen: Callable[[list[RunEvent]], None] | None = None,
) -> Progress:
    """The run once it has ended or waits on someone, or as it stands after `wait` seconds (capped at
    the event log's MAX_WAIT: every caller answers within API Gateway's 30 s).

    `ended` waits for the run's end only, through any human wait (MCP's tasks/result blocks until the
    task is terminal; someone may answer through the API meanwhile). `seen` is handed each page of
    events as the wait reads them, in order, so a caller can report progress without a second read."""
    deadline = time.monotonic() + min(max(wait, 0.0), eventlog.MAX_WAIT)
    # The head is read before the run: anything that happens after this read is an event after
    # `cursor`, so the long-poll below cannot miss it.
    current = now(tenant_id, run_id)
    cursor = current.next
    # A wait is announced before its run moves to `waiting`, and that move writes no event: after an
    # announcement, the run is looked at again every poll until it shows (or something else happens).
    announced = False
    while not (current.run.done if ended else current.settled):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        poll = min(remaining, eventlog.POLL_INTERVAL) if announced else remaining
        page = eventlog.read(tenant_id, run_id, cursor, poll, known=True)  # now() read the run
        cursor = page.next
        if seen is not None and page.events:
            seen(page.events)
        for event in page.events:
            if event.type in ANNOUNCEMENTS:
                announced = True
            elif event.type in ANSWERS:  # answered before the run was seen waiting: back to the log
                announced = False
        if announced or page.done or any(event.type in SIGNALS for event in page.events):
            run = stores().runs.get(tenant_id, run_id)
            current = Progress(run=run, pending=pending(tenant_id, run), next=cursor)
            announced = announced and not (current.settled or run.done)
        else:
            current = current.model_copy(update={"next": cursor})
    return current
