"""/v1/agents/{id}/runs, /v1/agents/{id}/run and /v1/runs."""

import json
from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise import events, start
from stepwise.api.context import tenant
from stepwise.api.responses import json_response
from stepwise.errors import BadGateway, Malformed, Unavailable
from stepwise.models import RunAccepted, RunCreate, RunList, RunStatus, RunView, SyncRunCreate, SyncRunResult
from stepwise.store import runs

router = APIGatewayHttpRouter()

STREAM_WAIT = 20.0


@router.post("/v1/agents/<agent_id>/runs")
def create_run(agent_id: str, body: RunCreate) -> Response[RunAccepted]:
    run = start.start_run(tenant(router), agent_id, body)
    return json_response({"run_id": run.run_id, "session_id": run.session_id, "status": run.status}, 202)


@router.post("/v1/agents/<agent_id>/run")
def run_sync(agent_id: str, body: SyncRunCreate) -> Response[SyncRunResult]:
    run = start.run_sync(tenant(router), agent_id, body)
    if run.error is not None:
        busy = run.error.code in {"rate_limited", "provider_unavailable"}
        failure = Unavailable if busy else BadGateway
        raise failure(run.error.message, code=run.error.code, details={"run_id": run.run_id})
    return json_response({"run_id": run.run_id, "session_id": run.session_id, "output": run.output})


@router.get("/v1/runs")
def list_runs(
    agent_id: Annotated[str | None, Query(max_length=64)] = None,
    session_id: Annotated[str | None, Query(max_length=64)] = None,
    status: Annotated[RunStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = runs.PAGE_LIMIT,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
) -> Response[RunList]:
    page, token = runs.list_runs(
        tenant(router),
        agent_id=agent_id,
        session_id=session_id,
        status=status,
        limit=limit,
        next_token=next_token,
    )
    return json_response({"runs": [r.public() for r in page], "next_token": token})


@router.get("/v1/runs/<run_id>")
def get_run(run_id: str) -> Response[RunView]:
    return json_response(runs.get(tenant(router), run_id).public())


@router.get("/v1/runs/<run_id>/events")
def run_events(
    run_id: str,
    after: Annotated[int, Query(ge=0)] = 0,
    wait: Annotated[float, Query(ge=0, le=events.MAX_WAIT)] = 0,
) -> Response[events.EventPage]:
    page = events.read(tenant(router), run_id, after, wait)
    return json_response(page.model_dump(mode="json"))


def _last_event_id(value: str | None) -> int:
    if not value:
        return 0
    try:
        return max(int(value), 0)
    except ValueError:
        raise Malformed("Last-Event-ID must be an event seq", code="invalid_last_event_id") from None


@router.get("/v1/runs/<run_id>/stream")
def stream(
    run_id: str,
    after: Annotated[int | None, Query(ge=0)] = None,
    wait: Annotated[float, Query(ge=0, le=events.MAX_WAIT)] = STREAM_WAIT,
) -> Response[str | None]:
    """Server-Sent Events. API Gateway buffers responses, so each response carries the events that
    arrived within `wait` and ends; EventSource reconnects with Last-Event-ID and resumes exactly
    there. A finished run with nothing left answers 204, which tells EventSource to stop."""
    start_after = (
        after if after is not None else _last_event_id(router.current_event.headers.get("last-event-id"))
    )
    page = events.read(tenant(router), run_id, start_after, wait)
    if page.done and not page.events:
        return Response(status_code=204)
    lines = ["retry: 1000", ""]
    for event in page.events:
        data = json.dumps(event.model_dump(mode="json"), ensure_ascii=False)
        lines += [f"id: {event.seq}", f"event: {event.type}", f"data: {data}", ""]
    return Response(
        status_code=200,
        content_type="text/event-stream",
        body="\n".join(lines) + "\n",
        headers={"Cache-Control": "no-cache"},
    )
