"""Answering paused runs through the API: approvals and client tools."""

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Header, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, Field

from stepwise.api.context import tenant
from stepwise.api.params import InteractionId, RunId, SessionId
from stepwise.api.responses import json_response, responses
from stepwise.core.errors import ApiError, Conflict, Gone, NotFound, Unprocessable
from stepwise.core.schema import Strict
from stepwise.interactions.models import Interaction
from stepwise.runs import answers
from stepwise.store import interactions, runs, sessions

router = APIGatewayHttpRouter()
INTERACTIONS = ["interactions"]


class ApproveBody(Strict):
    approved: bool
    tool_call_id: str | None = Field(default=None, max_length=128)
    reason: str | None = Field(default=None, max_length=2000)


class ApprovalAnswer(Strict):
    approved: bool
    reason: str | None = Field(default=None, max_length=2000)


class ClientToolAnswer(Strict):
    tool_call_id: str = Field(max_length=128)
    outcome: Literal["completed", "error"]
    output: Any = None


class RespondBody(Strict):
    answer: ApprovalAnswer | ClientToolAnswer


# What a client may be asked: an approval or a client tool's result; a run paused by its budget or by a
# provider's circuit waits as an interaction too (POST /v1/runs/{id}/resume answers it). A delegation's
# wait is never listed (its child run answers it).
InteractionKind = Literal["approval", "client_tool", "budget", "provider"]
InteractionStatus = Literal["pending", "answered", "expired"]


class InteractionView(BaseModel):
    interaction_id: str
    run_id: str
    kind: InteractionKind
    status: InteractionStatus
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    created_at: str


class InteractionList(BaseModel):
    interactions: list[InteractionView]


@router.get(
    "/v1/sessions/<session_id>/interactions",
    summary="List a session's interactions",
    description="The approvals and client tools its runs asked for, optionally with one status.",
    responses=responses(200, "The interactions", 404),
    tags=INTERACTIONS,
)
def list_interactions(
    session_id: SessionId, status: Annotated[InteractionStatus | None, Query()] = None
) -> Response[InteractionList]:
    tenant_id = tenant(router)
    sessions.get(tenant_id, session_id)
    found = interactions.for_session(tenant_id, session_id, status)
    # A delegation's wait is answered by its child run, not by anyone who reads this list.
    return json_response({"interactions": [i.public() for i in found if i.kind != "delegation"]})


@router.post(
    "/v1/sessions/interactions/<interaction_id>/respond",
    summary="Answer an interaction",
    description="`{answer: {approved, reason?}}` for an approval, `{answer: {tool_call_id, outcome, "
    "output}}` for a client tool. The `Idempotency-Key` header is required (422 without): the same key "
    "and answer again change nothing, the same key with another answer is a 422, and an interaction "
    "already answered under another key is a 409.",
    responses=responses(202, "The answered interaction", 400, 404, 409, 410, 413, 503),
    tags=INTERACTIONS,
)
def respond(
    interaction_id: InteractionId,
    body: RespondBody,
    # Required, but checked here so that its absence is the contract's 422 with its own code.
    key: Annotated[
        str | None,
        Header(alias="idempotency-key", description="Required: the same key and answer again change nothing"),
    ] = None,
) -> Response[InteractionView]:
    tenant_id = tenant(router)
    if not key:
        raise Unprocessable("the Idempotency-Key header is required", code="idempotency_key_required")
    interaction = interactions.get(tenant_id, interaction_id)
    if interaction.kind == "delegation":  # answered by the child run's ending alone
        raise NotFound(f"interaction {interaction_id} not found", code="interaction_not_found")
    answer = body.answer
    if interaction.kind == "approval" and not isinstance(answer, ApprovalAnswer):
        raise Unprocessable("an approval is answered with {approved, reason?}", code="wrong_answer_kind")
    if interaction.kind == "client_tool":
        if not isinstance(answer, ClientToolAnswer):
            raise Unprocessable(
                "a client tool is answered with {tool_call_id, outcome, output}", code="wrong_answer_kind"
            )
        if answer.tool_call_id != interaction.tool_call_id:
            raise Unprocessable("tool_call_id does not match this interaction", code="tool_call_mismatch")
    updated = answers.respond(tenant_id, interaction_id, answer.model_dump(mode="json"), key=key, by="api")
    return json_response(updated.public(), 202)


@router.post(
    "/v1/runs/<run_id>/approve",
    summary="Decide a run's pending approval",
    description="Without `tool_call_id`, the run's only pending approval (409 `ambiguous_approval` when "
    "it has several). Answers as `POST /v1/sessions/interactions/{interaction_id}/respond` does: 202 with "
    "the answered interaction; when the approval (the named one, else the run's latest) is no longer "
    "pending, 409 `already_answered` if it was decided, 410 `interaction_closed` if it expired; 409 "
    "`no_pending_approval` when the run never asked for one.",
    responses=responses(202, "The answered approval", 400, 404, 409, 410, 413, 503),
    tags=INTERACTIONS,
)
def approve(run_id: RunId, body: ApproveBody) -> Response[InteractionView]:
    tenant_id = tenant(router)
    runs.get(tenant_id, run_id)
    asked = [i for i in interactions.for_run(tenant_id, run_id) if i.kind == "approval"]
    if body.tool_call_id is not None:
        asked = [i for i in asked if i.tool_call_id == body.tool_call_id]
    pending = [i for i in asked if i.status == "pending"]
    if not pending:
        raise _not_pending(asked, body.tool_call_id)
    if len(pending) > 1:
        raise Conflict(
            "the run has several pending approvals; name one with tool_call_id",
            code="ambiguous_approval",
            details={"tool_call_ids": [i.tool_call_id for i in pending]},
        )
    answer = {"approved": body.approved, "reason": body.reason}
    updated = answers.respond(tenant_id, pending[0].interaction_id, answer, key=None, by="api")
    return json_response(updated.public(), 202)


def _not_pending(asked: list[Interaction], tool_call_id: str | None) -> ApiError:
    """Why there is nothing to approve, with the status and code respond answers for the same outcome."""
    which = " for that tool call" if tool_call_id else ""
    if not asked:
        return Conflict(f"the run has no pending approval{which}", code="no_pending_approval")
    latest = max(asked, key=lambda i: i.created_at)
    if latest.status == "answered":
        return Conflict(f"the approval{which} was already answered", code="already_answered")
    return Gone(
        f"the approval{which} is {latest.status}; it can no longer be answered", code="interaction_closed"
    )
