"""Interactions: the pauses of a run. Every answer path ends in `answer()`, one conditional update
pending → answered, so exactly one answer wins however many arrive."""

from __future__ import annotations

import contextlib
import uuid
from datetime import timedelta
from typing import Any

from pynamodb.exceptions import DoesNotExist, PutError, UpdateError

from stepwise.core.errors import NotFound
from stepwise.core.schema import utcnow
from stepwise.core.tables import InteractionItem, bind, condition_failed, same_tenant, tenant_key
from stepwise.interactions.models import Interaction, NewInteraction


def _model(item: InteractionItem) -> Interaction:
    return Interaction(
        interaction_id=item.interaction_id,
        run_id=item.run_id,
        session_id=item.session_id,
        agent_id=item.agent_id,
        kind=item.kind,
        status=item.status,
        step=int(item.step),
        tool_call_id=item.tool_call_id,
        tool_call_index=int(item.tool_call_index),
        tool_name=item.tool_name,
        arguments=item.arguments or {},
        digest=item.digest,
        timeout_seconds=int(item.timeout_seconds),
        channels=item.channels,
        has_token=item.task_token is not None,
        answer=item.answer,
        answer_key=item.answer_key,
        answered_by=item.answered_by,
        answered_at=item.answered_at,
        delivered=bool(item.delivered),
        created_at=item.created_at,
        deadline=item.deadline,
    )


def create(tenant_id: str, new: NewInteraction) -> Interaction:
    """Create the pause for a tool call, once: a retried Step finds the one it made before. It is
    listed under `new.listed_session_id` (a delegated run's root session), else its own session."""
    bind()
    now = utcnow()
    item = InteractionItem(
        tenant_id,
        new.interaction_id,
        session_key=tenant_key(tenant_id, new.listed_session_id or new.session_id),
        run_key=tenant_key(tenant_id, new.run_id),
        **new.model_dump(exclude={"interaction_id", "listed_session_id"}),
        status="pending",
        created_at=now,
        deadline=now + timedelta(seconds=new.timeout_seconds),
    )
    try:
        item.save(condition=InteractionItem.interaction_id.does_not_exist())
    except PutError as exc:
        if not condition_failed(exc):
            raise
        return get(tenant_id, new.interaction_id)
    return _model(item)


def _item(tenant_id: str, interaction_id: str) -> InteractionItem:
    bind()
    try:
        return InteractionItem.get(tenant_id, interaction_id, consistent_read=True)
    except DoesNotExist:
        raise NotFound(f"interaction {interaction_id} not found", code="interaction_not_found") from None


def get(tenant_id: str, interaction_id: str) -> Interaction:
    return _model(_item(tenant_id, interaction_id))


def task_token(tenant_id: str, interaction_id: str) -> str | None:
    return _item(tenant_id, interaction_id).task_token


def attach_token(tenant_id: str, interaction_id: str, token: str) -> Interaction:
    """Store the task token that resumes the run (the wait state's first act)."""
    item = _item(tenant_id, interaction_id)
    item.update(actions=[InteractionItem.task_token.set(token)])
    return _model(item)


def answer(
    tenant_id: str, interaction_id: str, answer: dict[str, Any], *, key: str | None, by: str | None
) -> bool:
    """pending → answered. True for the one answer that wins; False when it was no longer pending.
    The write carries a token of its own: botocore retries a write whose answer was lost, and that
    retry fails the condition its first attempt met; the token on the item says the win was ours."""
    bind()
    token = uuid.uuid4().hex
    try:
        InteractionItem(tenant_id, interaction_id).update(
            actions=[
                InteractionItem.answer_write.set(token),
                InteractionItem.status.set("answered"),
                InteractionItem.answer.set(answer),
                InteractionItem.answer_key.set(key) if key else InteractionItem.answer_key.remove(),
                InteractionItem.answered_by.set(by) if by else InteractionItem.answered_by.remove(),
                InteractionItem.answered_at.set(utcnow()),
            ],
            condition=InteractionItem.interaction_id.exists() & (InteractionItem.status == "pending"),
        )
    except UpdateError as exc:
        if condition_failed(exc):
            with contextlib.suppress(NotFound):
                return _item(tenant_id, interaction_id).answer_write == token
            return False
        raise
    return True


def mark_delivered(tenant_id: str, interaction_id: str) -> None:
    bind()
    InteractionItem(tenant_id, interaction_id).update(actions=[InteractionItem.delivered.set(1)])


def close(tenant_id: str, interaction_id: str, status: str = "expired") -> bool:
    """pending → expired (a deadline passed, or the run was cancelled): its links then answer 410."""
    bind()
    try:
        InteractionItem(tenant_id, interaction_id).update(
            actions=[InteractionItem.status.set(status)],
            condition=InteractionItem.interaction_id.exists() & (InteractionItem.status == "pending"),
        )
    except UpdateError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def for_session(tenant_id: str, session_id: str, status: str | None = None) -> list[Interaction]:
    bind()
    condition = InteractionItem.status == status if status else None
    items = InteractionItem.by_session.query(tenant_key(tenant_id, session_id), filter_condition=condition)
    return [_model(i) for i in same_tenant(items, tenant_id)]


def for_run(tenant_id: str, run_id: str, status: str | None = None) -> list[Interaction]:
    bind()
    condition = InteractionItem.status == status if status else None
    items = InteractionItem.by_run.query(tenant_key(tenant_id, run_id), filter_condition=condition)
    return [_model(i) for i in same_tenant(items, tenant_id)]
