"""/v1/agents/{id}/runs, /v1/agents/{id}/run and /v1/runs."""

import json
from collections.abc import Callable
from functools import cache
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise import cancel, config, events, replay, start
from stepwise.api.context import tenant
from stepwise.api.responses import json_response
from stepwise.errors import BadGateway, Conflict, Malformed, Unavailable, Unprocessable
from stepwise.models import RunAccepted, RunCreate, RunList, RunStatus, RunView, SyncRunCreate, SyncRunResult
from stepwise.store import runs

router = APIGatewayHttpRouter()

STREAM_WAIT = 20.0


IDEMPOTENCY_HOURS = 24


@cache
def _idempotent_start() -> tuple[Any, Callable[..., dict[str, Any]]]:
    """start_run behind Powertools idempotency, keyed by tenant, agent and Idempotency-Key, with the
    body as the payload to validate: the same key and body give the same run; another body is a 422."""
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    persistence = DynamoDBPersistenceLayer(table_name=config.tables().idempotency)
    settings = IdempotencyConfig(
        event_key_jmespath="[tenant_id, agent_id, key]",
        payload_validation_jmespath="body",
        expires_after_seconds=IDEMPOTENCY_HOURS * 3600,
    )

    @idempotent_function(data_keyword_argument="request", persistence_store=persistence, config=settings)
    def start_once(request: dict[str, Any]) -> dict[str, Any]:
        body = RunCreate.model_validate(request["body"])
        run = start.start_run(request["tenant_id"], request["agent_id"], body)
        return {"run_id": run.run_id, "session_id": run.session_id, "status": run.status}

    return settings, start_once


@router.post("/v1/agents/<agent_id>/runs")
def create_run(agent_id: str, body: RunCreate) -> Response[RunAccepted]:
    tenant_id = tenant(router)
    key = router.current_event.headers.get("idempotency-key")
    if not key:
        run = start.start_run(tenant_id, agent_id, body)
        return json_response({"run_id": run.run_id, "session_id": run.session_id, "status": run.status}, 202)
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyValidationError,
    )

    request = {"tenant_id": tenant_id, "agent_id": agent_id, "key": key, "body": body.model_dump(mode="json")}
    try:
        settings, start_once = _idempotent_start()
        settings.register_lambda_context(router.lambda_context)  # in-progress records expire with the call
        accepted = start_once(request=request)
    except IdempotencyValidationError:
        raise Unprocessable(
            "this Idempotency-Key was already used with a different body", code="idempotency_key_reused"
        ) from None
    except IdempotencyAlreadyInProgressError:
        raise Conflict(
            "a request with this Idempotency-Key is in progress; retry shortly", code="request_in_progress"
        ) from None
    return json_response(accepted, 202)


@router.post("/v1/runs/<run_id>/cancel")
def cancel_run(run_id: str) -> Response[RunView]:
    return json_response(cancel.cancel(tenant(router), run_id).public())


@router.post("/v1/runs/<run_id>/replay")
def replay_run(run_id: str, force: Annotated[bool, Query()] = False) -> Response[RunAccepted]:
    run = replay.replay(tenant(router), run_id, force=force)
    return json_response(
        {
            "run_id": run.run_id,
            "session_id": run.session_id,
            "status": run.status,
            "replay_of": run.replay_of,
        },
        201,
    )


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
