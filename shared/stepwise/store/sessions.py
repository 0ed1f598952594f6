"""Sessions: a shell item plus the messages of its runs, in one partition so one query rebuilds the
history. Messages are OpenAI chat-format dicts; their sort key orders them by run, step and slot."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, cast

from pynamodb.exceptions import DoesNotExist, PutError, UpdateError

from stepwise.core import config
from stepwise.core.errors import Conflict, NotFound
from stepwise.core.schema import utcnow
from stepwise.core.tables import SessionItem, bind, condition_failed, tenant_key
from stepwise.sessions.models import Earlier, Session

SHELL = "session"
MESSAGE_PREFIX = "msg#"


def message_key(run_id: str, step: int, slot: str) -> str:
    return f"{MESSAGE_PREFIX}{run_id}#{step:04d}#{slot}"


def _not_found(session_id: str) -> NotFound:
    return NotFound(f"session {session_id} not found", code="session_not_found")


def create(
    tenant_id: str,
    session_id: str,
    agent_id: str,
    active_run_id: str | None = None,
    user_id: str | None = None,
) -> Session:
    """A new session, already held by its first run when one is given. Conflict `session_exists` when
    the id is taken (a caller that names its sessions, like the AG-UI door, may race another start)."""
    bind()
    session = Session(
        session_id=session_id,
        agent_id=agent_id,
        user_id=user_id,
        created_at=utcnow(),
        active_run_id=active_run_id,
    )
    item = SessionItem(
        tenant_key(tenant_id, session_id),
        SHELL,
        agent_id=agent_id,
        user_id=user_id,
        created_at=session.created_at,
        completed_runs=[],
        active_run_id=active_run_id,
    )
    try:
        item.save(condition=SessionItem.pk.does_not_exist())
    except PutError as exc:
        if not condition_failed(exc):
            raise
        # botocore retries a put whose answer was lost (a timeout), and the retry finds the session
        # it made itself: that is a success (issue 30's soak saw POST /runs answer 409 session_exists
        # for its own new session). Our own item is the one with our creation instant and first run.
        try:
            found = SessionItem.get(item.pk, SHELL, consistent_read=True)
        except DoesNotExist:
            found = None
        ours = found is not None and (found.created_at, found.agent_id, found.active_run_id) == (
            session.created_at,
            agent_id,
            active_run_id,
        )
        if not ours:
            raise Conflict(f"session {session_id} exists already", code="session_exists") from exc
    return session


def get(tenant_id: str, session_id: str) -> Session:
    bind()
    try:
        item = SessionItem.get(tenant_key(tenant_id, session_id), SHELL, consistent_read=True)
    except DoesNotExist:
        raise _not_found(session_id) from None
    return Session(
        session_id=session_id,
        agent_id=item.agent_id or "",
        user_id=item.user_id,
        created_at=item.created_at,
        completed_runs=list(item.completed_runs or []),
        active_run_id=item.active_run_id,
        queue=list(item.queue or []),
    )


def put_message(
    tenant_id: str, session_id: str, run_id: str, step: int, slot: str, message: dict[str, Any]
) -> None:
    """Write one message at its fixed key: a retried step overwrites itself instead of duplicating.
    Messages expire by TTL after the retention period; the session's shell is never given one."""
    bind()
    message_item(tenant_id, session_id, run_id, step, slot, message).save()


def message_item(
    tenant_id: str, session_id: str, run_id: str, step: int, slot: str, message: dict[str, Any]
) -> SessionItem:
    """A message's item as put_message writes it (stepwise.store.run_context writes some with the
    context, in one transaction)."""
    return SessionItem(
        tenant_key(tenant_id, session_id),
        message_key(run_id, step, slot),
        run_id=run_id,
        message=message,
        expires_at=utcnow() + timedelta(days=config.runtime().message_retention_days),
    )


def get_message(tenant_id: str, session_id: str, run_id: str, step: int, slot: str) -> dict[str, Any] | None:
    bind()
    try:
        item = SessionItem.get(
            tenant_key(tenant_id, session_id), message_key(run_id, step, slot), consistent_read=True
        )
    except DoesNotExist:
        return None
    return item.message


def _items(tenant_id: str, session_id: str) -> list[SessionItem]:
    bind()
    items = SessionItem.query(
        tenant_key(tenant_id, session_id),
        SessionItem.sk.startswith(MESSAGE_PREFIX),
        consistent_read=True,
    )
    return [i for i in items if i.message is not None]


def messages(tenant_id: str, session_id: str, run_ids: set[str] | None = None) -> list[dict[str, Any]]:
    """Messages in order, optionally only those of the given runs."""
    return [i.message for i in _items(tenant_id, session_id) if run_ids is None or i.run_id in run_ids]


def _expiry(item: SessionItem) -> int:
    return int(item.expires_at.timestamp()) if item.expires_at else 1 << 62


def history(tenant_id: str, session_id: str, run_id: str) -> tuple[Earlier, list[dict[str, Any]]]:
    """What the model sees for `run_id`, in one query of the whole session: the messages of the
    session's completed runs, and those of this run so far."""
    completed = set(get(tenant_id, session_id).completed_runs)
    earlier, current = Earlier(), []
    for item in _items(tenant_id, session_id):
        if item.run_id == run_id:
            current.append(item.message)
        elif item.run_id in completed:
            earlier.messages.append(item.message)
            earlier.expiries.append(_expiry(item))
    return earlier, current


CHECKPOINT_PREFIX = "ckpt#"
CHECKPOINT_LIMIT = 300_000  # bytes of JSON: a checkpoint is one item (400 KB with its keys)


def _run_items(tenant_id: str, session_id: str, run_id: str) -> list[SessionItem]:
    bind()
    items = SessionItem.query(
        tenant_key(tenant_id, session_id),
        SessionItem.sk.startswith(f"{MESSAGE_PREFIX}{run_id}#"),
        consistent_read=True,
    )
    return [i for i in items if i.message is not None]


def run_messages(tenant_id: str, session_id: str, run_id: str) -> list[dict[str, Any]]:
    """This run's messages alone, in order (one Query of its key range, not the session's)."""
    return [i.message for i in _run_items(tenant_id, session_id, run_id)]


def earlier_history(tenant_id: str, session_id: str, run_id: str) -> Earlier:
    """The history `run_id` begins with, folded once per run: the last completed run's checkpoint
    (what came before it) plus that run's own messages. One item and one run's messages, however long
    the session is; the whole session is read only when that checkpoint is missing (it did not fit an
    item, or it predates checkpoints)."""
    completed = get(tenant_id, session_id).completed_runs
    if not completed:
        return Earlier()
    last = completed[-1]
    before = _checkpoint(tenant_id, session_id, last)
    if before is None:
        return history(tenant_id, session_id, run_id)[0]
    items = _run_items(tenant_id, session_id, last)
    own = Earlier([i.message for i in items], [_expiry(i) for i in items])
    return (before + own).live(int(utcnow().timestamp()))


def put_checkpoint(tenant_id: str, session_id: str, run_id: str, earlier: Earlier) -> bool:
    """Keep the history of the session's earlier runs as `run_id` found it, so rebuilding the run's
    conversation later reads one item and the run's own messages, and the next run folds this one in
    from here. False (nothing written) when it does not fit an item: a rebuild then reads the session,
    as without a checkpoint. The item expires with its newest message; each message keeps its own."""
    body = json.dumps(earlier.messages, ensure_ascii=False)
    if len(body.encode()) > CHECKPOINT_LIMIT:
        return False
    bind()
    retention = utcnow() + timedelta(days=config.runtime().message_retention_days)
    SessionItem(
        tenant_key(tenant_id, session_id),
        f"{CHECKPOINT_PREFIX}{run_id}",
        run_id=run_id,
        messages={"messages": earlier.messages, "expiries": earlier.expiries},
        expires_at=retention,
    ).save()
    return True


def _checkpoint(tenant_id: str, session_id: str, run_id: str) -> Earlier | None:
    bind()
    try:
        item = SessionItem.get(
            tenant_key(tenant_id, session_id), f"{CHECKPOINT_PREFIX}{run_id}", consistent_read=True
        )
    except DoesNotExist:
        return None
    body = item.messages
    if not isinstance(body, dict):
        return None  # written before expiries were kept: read the session instead
    return Earlier(list(body.get("messages") or []), [int(x) for x in body.get("expiries") or []])


def checkpoint(tenant_id: str, session_id: str, run_id: str) -> Earlier | None:
    """The earlier runs' history as `run_id` found it, less what has expired since (None without a
    checkpoint)."""
    found = _checkpoint(tenant_id, session_id, run_id)
    return None if found is None else found.live(int(utcnow().timestamp()))


def complete_run(tenant_id: str, session_id: str, run_id: str) -> None:
    """Make a finished run's messages part of the session's history (once, even if retried)."""
    bind()
    item = SessionItem(tenant_key(tenant_id, session_id), SHELL)
    try:
        item.update(
            actions=[SessionItem.completed_runs.set((SessionItem.completed_runs | []).append([run_id]))],
            condition=SessionItem.pk.exists() & ~SessionItem.completed_runs.contains(run_id),
        )
    except UpdateError as exc:
        if not condition_failed(exc):  # already recorded: a retry of the same step
            raise


def _update(tenant_id: str, session_id: str, actions: list[Any], condition: Any) -> bool:
    bind()
    try:
        SessionItem(tenant_key(tenant_id, session_id), SHELL).update(actions=actions, condition=condition)
    except UpdateError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def claim(tenant_id: str, session_id: str, run_id: str) -> bool:
    """Make `run_id` the session's active run if none is: two concurrent starts cannot both win."""
    return _update(
        tenant_id,
        session_id,
        [SessionItem.active_run_id.set(run_id)],
        SessionItem.pk.exists()
        & (SessionItem.active_run_id.does_not_exist() | (SessionItem.active_run_id == run_id)),
    )


def enqueue(tenant_id: str, session_id: str, run_id: str, *, first: bool = False) -> bool:
    """Queue `run_id` behind the active run (at the front for `first`). False when no run is active
    any more: the caller claims instead."""
    queue = SessionItem.queue | []
    action = queue.prepend([run_id]) if first else queue.append([run_id])
    return _update(tenant_id, session_id, [SessionItem.queue.set(action)], SessionItem.active_run_id.exists())


def release(tenant_id: str, session_id: str, run_id: str) -> str | None:
    """`run_id` has ended: hand the session to the first queued run (returned, to be started), or
    free it. A run that was only queued is taken out of the queue."""
    for _ in range(20):  # optimistic: retried when a concurrent enqueue changed the queue
        session = get(tenant_id, session_id)
        queue = session.queue
        if session.active_run_id != run_id:
            if run_id not in queue:
                return None
            remaining = [r for r in queue if r != run_id]
            taken_out = SessionItem.queue.set(cast(Any, remaining))
            if _update(tenant_id, session_id, [taken_out], SessionItem.queue == queue):
                return None
            continue
        if queue:
            actions = [SessionItem.active_run_id.set(queue[0]), SessionItem.queue.set(cast(Any, queue[1:]))]
            condition = (SessionItem.active_run_id == run_id) & (SessionItem.queue == queue)
            if _update(tenant_id, session_id, actions, condition):
                return queue[0]
            continue
        condition = (SessionItem.active_run_id == run_id) & (
            SessionItem.queue.does_not_exist() | (SessionItem.queue == [])
        )
        if _update(tenant_id, session_id, [SessionItem.active_run_id.remove()], condition):
            return None
    raise RuntimeError(f"session {session_id} kept changing; could not release run {run_id}")


def delete(tenant_id: str, session_id: str) -> None:
    get(tenant_id, session_id)
    bind()
    with SessionItem.batch_write() as batch:
        for item in SessionItem.query(tenant_key(tenant_id, session_id)):
            batch.delete(item)
