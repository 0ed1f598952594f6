"""/v1/runs/{id}/events, /stream and /follow: the routes the light events function serves (it imports
none of the API's other routes, see functions/events/app.py)."""

import json
from typing import Annotated, Any, get_args

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Header, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import RunId
from stepwise.api.responses import json_response, responses
from stepwise.core.errors import Malformed
from stepwise.follow import service as follow
from stepwise.runs import eventlog as events
from stepwise.runs.models import EventType

router = APIGatewayHttpRouter()
RUNS = ["runs"]

STREAM_WAIT = 20.0
WAIT = "Seconds to wait for events; at most 25 are used (a larger value is clamped, not refused)"
WAIT_HEADER = "Stepwise-Wait"  # the stream's echo of the wait it used (the events page has `wait`)
# One Server-Sent Event of the stream, as an SSE parser reads it (OpenAPI 3.1 has no itemSchema yet).
SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The event's seq"},
        "event": {"type": "string", "enum": list(get_args(EventType))},
        "data": {"type": "string", "description": "The event as JSON: `{seq, type, data, at}`"},
        "retry": {"type": "integer"},
    },
    "required": ["id", "event", "data"],
}


@router.get(
    "/v1/runs/<run_id>/events",
    summary="Read a run's events",
    description="The events after seq `after`; waits up to `wait` seconds for some to arrive (at most 25: "
    "a larger `wait` is clamped, and the page's `wait` says what was used). `next` is the `after` of the "
    "next call; `done` is true once the run has finished and nothing is left.",
    responses=responses(200, "A page of events", 404),
    tags=RUNS,
)
def run_events(
    run_id: RunId,
    after: Annotated[int, Query(ge=0)] = 0,
    wait: Annotated[float, Query(ge=0, description=WAIT)] = 0,
) -> Response[events.EventPage]:
    used = events.capped_wait(wait)
    page = events.read(tenant(router), run_id, after, used)
    return json_response(page.model_copy(update={"wait": used}).model_dump(mode="json"))


def _last_event_id(value: str | None) -> int:
    if not value:
        return 0
    try:
        return max(int(value), 0)
    except ValueError:
        raise Malformed("Last-Event-ID must be an event seq", code="invalid_last_event_id") from None


@router.get(
    "/v1/runs/<run_id>/stream",
    summary="Stream a run's events (Server-Sent Events)",
    description="The events of `GET /v1/runs/{run_id}/events` as SSE: `id:` is the seq, `event:` the type "
    "and `data:` the event. Each response carries what arrived within `wait` seconds and ends; "
    "reconnect with `Last-Event-ID` to resume. 204 once the run has finished and nothing is left. "
    "A `wait` over 25 is clamped; the `Stepwise-Wait` header says what was used.",
    responses={
        **responses(200, "Events", 400, 404, content={"text/event-stream": {"schema": SSE_EVENT}}),
        **responses(204, "The run has finished and every event was sent", content={}),
    },
    tags=RUNS,
)
def stream(
    run_id: RunId,
    after: Annotated[int | None, Query(ge=0)] = None,
    wait: Annotated[float, Query(ge=0, description=WAIT)] = STREAM_WAIT,
    last_event_id: Annotated[
        str | None,
        Header(alias="last-event-id", description="Resume after this seq (when `after` is absent)"),
    ] = None,
) -> Response[str | None]:
    """Server-Sent Events. API Gateway buffers responses, so each response carries the events that
    arrived within `wait` and ends; EventSource reconnects with Last-Event-ID and resumes exactly
    there. A finished run with nothing left answers 204, which tells EventSource to stop."""
    start_after = after if after is not None else _last_event_id(last_event_id)
    used = events.capped_wait(wait)
    page = events.read(tenant(router), run_id, start_after, used)
    if page.done and not page.events:
        return Response(status_code=204, headers={WAIT_HEADER: _seconds(used)})
    lines = ["retry: 1000", ""]
    for event in page.events:
        data = json.dumps(event.model_dump(mode="json"), ensure_ascii=False)
        lines += [f"id: {event.seq}", f"event: {event.type}", f"data: {data}", ""]
    return Response(
        status_code=200,
        content_type="text/event-stream",
        body="\n".join(lines) + "\n",
        headers={"Cache-Control": "no-cache", WAIT_HEADER: _seconds(used)},
    )


def _seconds(wait: float) -> str:
    return f"{wait:g}"


@router.post(
    "/v1/runs/<run_id>/follow",
    summary="Follow a run over a WebSocket",
    description="A signed, single-use `wss://` URL, valid for 60 seconds to connect, that needs no "
    "header (browsers can use it). Each text message is one event exactly as in "
    "`GET /v1/runs/{run_id}/events` (`{seq, type, data, at}`), from seq `after + 1` on, in order, each "
    "once; the server closes the socket after the run's terminal event. A socket that ends without it "
    "(API Gateway closes idle ones after 10 minutes) resumes with a new URL from the last seq received.",
    responses=responses(200, "The URL to connect to", 404),
    tags=RUNS,
)
def follow_run(run_id: RunId, after: Annotated[int, Query(ge=0)] = 0) -> Response[follow.FollowUrl]:
    issued = follow.issue(tenant(router), run_id, after)
    return json_response(issued.model_dump(mode="json"))
