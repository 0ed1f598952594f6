"""/v1/sessions/{id}."""

from aws_lambda_powertools.event_handler import Response
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
    description="The session with its runs (oldest first) and its messages.",
    responses=responses(200, "The session", 400, 404),
    tags=SESSIONS,
)
def get_session(session_id: SessionId) -> Response[SessionView]:
    tenant_id = tenant(router)
    session = sessions.get(tenant_id, session_id)
    session_runs, token = runs.list_runs(tenant_id, session_id=session_id, limit=100)
    usage = sum((r.usage for r in session_runs), Usage())
    while token:  # what the session spent counts every run, beyond the 100 it lists
        more, token = runs.list_runs(tenant_id, session_id=session_id, limit=100, next_token=token)
        usage = sum((r.usage for r in more), usage)
    return json_response(
        {
            **session.model_dump(mode="json"),
            "usage": usage.model_dump(mode="json"),
            "runs": [r.public() for r in reversed(session_runs)],
            "messages": sessions.messages(tenant_id, session_id),
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
