"""Answering a paused run. Every path (the API, approval links, Slack buttons, the respond endpoint)
converges here: one conditional update pending → answered, then SendTaskSuccess. If delivery fails
the answer stays recorded and undelivered, and answering again with the same key delivers it."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError

from stepwise.core import aws, observability
from stepwise.core.errors import Conflict, Gone, PayloadTooLarge, Unavailable, Unprocessable
from stepwise.interactions.models import Interaction
from stepwise.runs import events
from stepwise.runs.ports import stores

logger = Logger(service="stepwise")

# Step Functions' answers for a token that no longer waits (the execution ended or the state timed out).
_GONE_TOKEN_ERRORS = ("TaskDoesNotExist", "TaskTimedOut", "InvalidToken")
# Bytes of an answer's JSON: it is stored on the interaction's item (400 KB, beside the call's arguments)
# and handed to SendTaskSuccess (256 KiB of output), either of which would refuse more as a 500.
ANSWER_LIMIT = 200_000


def check_size(answer: dict[str, Any]) -> None:
    """413 `answer_too_large` for an answer no wait could take: asked before anything is recorded (a
    door answering several waits at once asks for each before it answers the first)."""
    size = len(json.dumps(answer, default=str).encode())
    if size > ANSWER_LIMIT:
        raise PayloadTooLarge(
            f"the answer takes {size} bytes of JSON, over the {ANSWER_LIMIT} an interaction takes",
            code="answer_too_large",
            details={"size": size, "limit": ANSWER_LIMIT},
        )


def deliver(tenant_id: str, interaction_id: str) -> bool:
    """Hand a recorded answer to the waiting execution. False when there is no token yet (the wait's
    Notify step will deliver it when it stores the token) or the wait is gone."""
    interactions = stores().interactions
    token = interactions.task_token(tenant_id, interaction_id)
    current = interactions.get(tenant_id, interaction_id)
    if token is None or current.answer is None:
        return False
    sfn = aws.client("stepfunctions")
    try:
        sfn.send_task_success(taskToken=token, output=json.dumps(current.answer))
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in _GONE_TOKEN_ERRORS:
            logger.warning("answer arrived after the wait ended", extra={"interaction_id": interaction_id})
            return False
        raise Unavailable("the answer is recorded but could not reach the run yet; send it again") from exc
    interactions.mark_delivered(tenant_id, interaction_id)
    return True


def _decided_event(tenant_id: str, interaction: Interaction, answer: dict[str, Any], by: str | None) -> None:
    base = {
        "interaction_id": interaction.interaction_id,
        "tool_call_id": interaction.tool_call_id,
        "tool_name": interaction.tool_name,
    }
    if interaction.kind == "approval":
        data = {
            **base,
            "approved": bool(answer.get("approved")),
            "reason": answer.get("reason"),
            "decided_by": by,
        }
        events.emit(tenant_id, interaction.run_id, "approval_decided", data)
    else:
        data = {**base, "outcome": answer.get("outcome")}
        events.emit(tenant_id, interaction.run_id, "client_tool_answered", data)


def respond(
    tenant_id: str, interaction_id: str, answer: dict[str, Any], *, key: str | None, by: str | None = None
) -> Interaction:
    """Record `answer` (exactly once) and resume the run. With an Idempotency-Key, the same key and
    answer again is a no-op success; the same key with another answer is a 422; an interaction
    answered under another key (or none) is a 409; a closed or expired one is a 410; an answer over
    ANSWER_LIMIT is a 413."""
    check_size(answer)
    interactions = stores().interactions
    interaction = interactions.get(tenant_id, interaction_id)
    if interactions.answer(tenant_id, interaction_id, answer, key=key, by=by):
        _decided_event(tenant_id, interaction, answer, by)
        deliver(tenant_id, interaction_id)
        answered = interactions.get(tenant_id, interaction_id)
        observability.answered(answered.kind, answered.created_at, answered.answered_at)
        return answered
    current = interactions.get(tenant_id, interaction_id)
    if current.status != "answered":
        raise Gone(
            f"interaction {interaction_id} is {current.status}; it can no longer be answered",
            code="interaction_closed",
        )
    if key is not None and current.answer_key == key:
        if current.answer != answer:
            raise Unprocessable(
                "this Idempotency-Key was already used with a different answer", code="idempotency_key_reused"
            )
        if not current.delivered:
            deliver(tenant_id, interaction_id)  # the first delivery failed: this retry completes it
        return interactions.get(tenant_id, interaction_id)
    raise Conflict(f"interaction {interaction_id} was already answered", code="already_answered")


def resume_parked(tenant_id: str, interaction_id: str, answer: dict[str, Any], *, by: str) -> bool:
    """Resume a run parked on a run-level wait (stepwise.loop.parking): the same path as an answer,
    pending → answered then SendTaskSuccess; the next Step goes on to its model call. False when the
    park was no longer pending (resumed already, or its timeout passed and the run moved on)."""
    interactions = stores().interactions
    if not interactions.answer(tenant_id, interaction_id, answer, key=None, by=by):
        current = interactions.get(tenant_id, interaction_id)
        if current.status == "answered" and not current.delivered:
            deliver(tenant_id, interaction_id)  # answered before, its delivery failed: complete it
        return False
    interaction = interactions.get(tenant_id, interaction_id)
    events.emit(tenant_id, interaction.run_id, "run_resumed", {"interaction_id": interaction_id, **answer})
    deliver(tenant_id, interaction_id)
    return True
