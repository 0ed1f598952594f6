"""/v1/agents/{id}/runs, /v1/agents/{id}/run and /v1/runs."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Header, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import AgentId, AgentIdQuery, RunId, SessionIdQuery
from stepwise.api.responses import json_response, responses
from stepwise.core.errors import ApiError, BadGateway, Unavailable, Unprocessable
from stepwise.core.ids import USER_ID
from stepwise.core.schema import Timestamp
from stepwise.runs import bulk_cancel, cancel, erase, start
from stepwise.runs.listing import RunFilter
from stepwise.runs.models import (
    RunAccepted,
    RunCreate,
    RunList,
    RunStatus,
    RunView,
    SyncRunCreate,
    SyncRunResult,
    Trigger,
)
from stepwise.store import runs
from stepwise.workflows import starting as workflow_runs

router = APIGatewayHttpRouter()
RUNS = ["runs"]


# How a synchronous run's error answers; any other is the model's failure (502). A budget refusal is
# decided before any model call: the input does not fit the agent's max_tokens_budget.
SYNC_FAILURES: dict[str, type[ApiError]] = {
    "rate_limited": Unavailable,
    "provider_unavailable": Unavailable,
    "budget_exceeded": Unprocessable,
}


@router.post(
    "/v1/agents/<agent_id>/runs",
    summary="Start a run",
    description="Starts the agent on `message`, in a new session or in `session_id`'s. With an "
    "`Idempotency-Key` header, the same key and body give the same run for 24 hours (another body: 422). "
    "A session with an active run applies `multitask_strategy` (`reject`: 409 `session_busy`). "
    "`attachments` are copied under the run, hashed and checked against their bytes before it is accepted "
    "(422 `content_type_mismatch`, `unsupported_content_type`, `upload_not_found`); inline files over "
    "5 MiB of base64 in total are 413 `attachments_too_large` (upload them instead).",
    responses=responses(
        202,
        "Accepted: the run is queued",
        400,
        404,
        409,
        410,
        413,
        429,
        503,
        described={413: "The body is over 6 MB, or its inline attachments over 5 MiB: use POST /v1/uploads"},
    ),
    tags=RUNS,
)
def create_run(
    agent_id: AgentId,
    body: RunCreate,
    key: Annotated[
        str | None,
        Header(alias="idempotency-key", description="The same key and body give the same run for 24 hours"),
    ] = None,
) -> Response[RunAccepted]:
    accepted = start.start_run_once(
        tenant(router), agent_id, body, key=key, lambda_context=router.lambda_context
    )
    return json_response(accepted, 202)


@router.post(
    "/v1/runs/<run_id>/cancel",
    summary="Cancel a run",
    responses=responses(200, "The cancelled run", 404, 409, 503),
    tags=RUNS,
)
def cancel_run(run_id: RunId) -> Response[RunView]:
    return json_response(cancel.cancel(tenant(router), run_id).public())


@router.post(
    "/v1/runs:cancel",
    summary="Cancel runs in bulk",
    description="The kill switch: cancels every active run of the tenant that matches the filters "
    "(`agent_id`, `user_id`, `status` among queued, running and waiting, `created_before`; none: all of "
    "them), each as `POST /v1/runs/{run_id}/cancel` would. Runs created after the request are never "
    "included. One request cancels for about ten seconds (at most 200 runs); when more match, "
    "`continuing` is true, `cancelled` counts those this request cancelled, and the rest are cancelled "
    "in the background within moments.",
    responses=responses(200, "How many runs were cancelled", 400, 413, 503),
    tags=RUNS,
)
def cancel_runs(body: bulk_cancel.CancelFilter) -> Response[bulk_cancel.BulkCancelled]:
    return json_response(bulk_cancel.cancel_matching(tenant(router), body).model_dump())


@router.post(
    "/v1/runs/<run_id>/replay",
    summary="Replay a run",
    description="A new run on the same input, citing `replay_of`. 409 with the reason when replaying "
    "could repeat side effects (`force=true` overrides); 410 `input_gone` when the input is no longer "
    "stored (its attachments were deleted or are past retention).",
    responses=responses(201, "The new run", 404, 409, 410, 413, 429, 503),
    tags=RUNS,
)
def replay_run(run_id: RunId, force: Annotated[bool, Query()] = False) -> Response[RunAccepted]:
    # A workflow run resumes (its succeeded nodes reused); any other run replays (stepwise.runs.replay).
    return json_response(workflow_runs.replay_any(tenant(router), run_id, force=force), 201)


@router.post(
    "/v1/agents/<agent_id>/run",
    summary="Run synchronously",
    description="One model call without tools; answers with the output. 422 `budget_exceeded` when the "
    "input does not fit the agent's token budget, 502 when the model fails, 503 when it is rate limited "
    "or unavailable.",
    responses=responses(200, "The run's output", 400, 404, 409, 410, 413, 429, 502, 503),
    tags=RUNS,
)
def run_sync(agent_id: AgentId, body: SyncRunCreate) -> Response[SyncRunResult]:
    run = start.run_sync(tenant(router), agent_id, body)
    if run.error is not None:
        failure = SYNC_FAILURES.get(run.error.code, BadGateway)
        raise failure(run.error.message, code=run.error.code, details={"run_id": run.run_id})
    return json_response({"run_id": run.run_id, "session_id": run.session_id, "output": run.output})


@router.get(
    "/v1/runs",
    summary="List runs",
    description="Newest first, optionally of one agent or session, with one status, of one end user, "
    "started by one kind of trigger, created in a window of time; pass `next_token` from a page to get "
    "the next one. The window narrows what is read; the status, user and trigger are filters applied to "
    "what is read, so a page may hold fewer runs than `limit` (even none) and still have a `next_token`.",
    responses=responses(200, "A page of runs", 400),
    tags=RUNS,
)
def list_runs(
    agent_id: AgentIdQuery = None,
    session_id: SessionIdQuery = None,
    status: Annotated[RunStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = runs.PAGE_LIMIT,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
    user_id: Annotated[str | None, Query(pattern=USER_ID, description="Only this end user's")] = None,
    trigger: Annotated[Trigger | None, Query(description="Only runs started this way")] = None,
    created_after: Annotated[
        Timestamp | None, Query(description="Only runs created at or after this time (RFC 3339)")
    ] = None,
    created_before: Annotated[
        Timestamp | None, Query(description="Only runs created before this time (RFC 3339)")
    ] = None,
) -> Response[RunList]:
    where = RunFilter(
        user_id=user_id, trigger=trigger, created_after=created_after, created_before=created_before
    )
    page, token = runs.list_runs(
        tenant(router),
        agent_id=agent_id,
        session_id=session_id,
        status=status,
        limit=limit,
        next_token=next_token,
        where=where,
    )
    return json_response({"runs": [r.public() for r in page], "next_token": token})


@router.get("/v1/runs/<run_id>", summary="Get a run", responses=responses(200, "The run", 404), tags=RUNS)
def get_run(run_id: RunId) -> Response[RunView]:
    return json_response(runs.get(tenant(router), run_id).public())


@router.delete(
    "/v1/runs/<run_id>/attachments",
    summary="Delete a run's attachments",
    description="Erases the run's files (every stored version) and their list, for good: a replay of the "
    "run is then 410 `input_gone`. 409 `run_active` while the run is active.",
    responses=responses(204, "Deleted", 404, 409, 503, content={}),
    tags=RUNS,
)
def delete_attachments(run_id: RunId) -> Response[None]:
    erase.attachments(tenant(router), run_id)
    return Response(status_code=204)
