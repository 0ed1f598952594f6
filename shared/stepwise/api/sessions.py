"""/v1/sessions/{id}."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import SessionId
from stepwise.api.responses import json_response, responses
from stepwise.core.errors import Conflict
from stepwise.llm.models import Usage
from stepwise.runs.models import SessionView
from stepwise.store import runs, sessions

router = APIGatewayHttpRouter()
SESSIONS = ["sessions"]


@router.get(
    "/v1/sessions/<session_id>",
    summary="Get a session",
    description="The session with a page of its runs and its messages. The first page holds the newest "
    "`limit` runs (100 by default), oldest first within the page; pass `next_token` for the page of "
    "older ones, as `GET /v1/runs` pages them. `usage` sums every run of the session, on every page.",
    responses=responses(200, "The session", 400, 404),
    tags=SESSIONS,
)
def get_session(
    session_id: SessionId,
    limit: Annotated[int, Query(ge=1, le=100)] = 100,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
) -> Response[SessionView]:
    tenant_id = tenant(router)
    session = sessions.get(tenant_id, session_id)
    page, page_token = runs.list_runs(tenant_id, session_id=session_id, limit=limit, next_token=next_token)
    usage = Usage()
    token: str | None = None
    while True:  # what the session spent counts every run, beyond the page it lists
        every, token = runs.list_runs(tenant_id, session_id=session_id, limit=100, next_token=token)
        usage = sum((r.usage for r in every), usage)
        if not token:
            break
    return json_response(
        {
            **session.model_dump(mode="json"),
            "usage": usage.model_dump(mode="json"),
            "runs": [r.public() for r in reversed(page)],
            "messages": sessions.messages(tenant_id, session_id),
            "next_token": page_token,
        }
    )


@router.delete(
    "/v1/sessions/<session_id>",
    summary="Delete a session",
    description="409 `session_busy` while one of its runs is active.",
    responses=responses(204, "Deleted", 400, 404, 409, content={}),
    tags=SESSIONS,
)
def delete_session(session_id: SessionId) -> Response[None]:
    tenant_id = tenant(router)
    sessions.get(tenant_id, session_id)
    active, _ = runs.list_runs(tenant_id, session_id=session_id, limit=100)
    busy = [r.run_id for r in active if not r.done]
    if busy:
        raise Conflict(
            "the session has an active run; cancel it or wait for it to finish",
            code="session_busy",
            details={"active_runs": busy},
        )
    sessions.delete(tenant_id, session_id)
    return Response(status_code=204)
