"""/v1/usage and /v1/budgets: what the tenant spent, by any cut, and the budgets that pause or fail
its runs; /v1/runs/{id}/resume resumes a run its budget paused (see stepwise.usage)."""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel

from stepwise.api.context import tenant
from stepwise.api.params import RunId
from stepwise.api.responses import json_response, responses
from stepwise.runs.models import RunView
from stepwise.usage import reads, service
from stepwise.usage.budgets import Budget, BudgetSet
from stepwise.usage.reads import UsageRow

router = APIGatewayHttpRouter()
SPEND = ["spend"]
Scope = Annotated[
    str,
    Path(description="`tenant`, `agent:<agent_id>` or `user:<user_id>` (400 `invalid_scope` otherwise)"),
]


class UsageRows(BaseModel):
    rows: list[UsageRow]


class BudgetList(BaseModel):
    budgets: list[Budget]


@router.get(
    "/v1/usage",
    summary="Read usage",
    description="The tenant's usage from `from` to `to` (ISO dates, a `to` day included whole, or "
    "date-times; the last 30 days by default), one row per group of `group_by`: one or two of `day`, "
    "`hour`, `agent`, `model`, `user`, `tool`, comma-separated. Each row sums tokens of each kind, "
    "`billable_tokens` (cached input at 25%, cache writes at the provider's premium), `cost_usd` (null "
    "when a model's price is unknown; billed tool actions included), `runs`, `model_calls` and "
    "`tool_calls`.",
    responses=responses(200, "The rows", 400),
    tags=SPEND,
)
def read_usage(
    start: Annotated[str | None, Query(alias="from", description="ISO date or date-time")] = None,
    end: Annotated[str | None, Query(alias="to", description="ISO date (included) or date-time")] = None,
    group_by: Annotated[
        str | None, Query(description="One or two of day, hour, agent, model, user, tool")
    ] = None,
) -> Response[UsageRows]:
    rows = reads.rows(tenant(router), start, end, group_by)
    return json_response({"rows": [r.model_dump(mode="json") for r in rows]})


@router.get(
    "/v1/budgets",
    summary="List budgets",
    description="Every budget of the tenant with its spend in the current period.",
    responses=responses(200, "The budgets"),
    tags=SPEND,
)
def list_budgets() -> Response[BudgetList]:
    budgets = service.list_all(tenant(router))
    return json_response({"budgets": [b.shown() for b in budgets]})


@router.put(
    "/v1/budgets/<scope>",
    summary="Set a budget",
    description="A limit on cost and/or billable tokens per `day` or `month` (UTC) for the tenant, an "
    "agent or a user. Reached, a run `pause`s on a `budget` wait (event and webhook `budget_reached`) or "
    "`fail`s with `budget_exceeded`; past `soft_limit_pct`, `budget_warning` once per period. "
    "`count_keys: deployment` counts only calls paid with the deployment's provider keys. Raising it "
    "resumes the runs it paused.",
    responses=responses(200, "The budget with its current spend", 400, 404, 413, 422, 503),
    tags=SPEND,
)
def put_budget(scope: Scope, body: BudgetSet) -> Response[Budget]:
    return json_response(service.put(tenant(router), scope, body).shown())


@router.get(
    "/v1/budgets/<scope>",
    summary="Get a budget",
    responses=responses(200, "The budget with its current spend", 400, 404),
    tags=SPEND,
)
def get_budget(scope: Scope) -> Response[Budget]:
    return json_response(service.get(tenant(router), scope).shown())


@router.delete(
    "/v1/budgets/<scope>",
    summary="Delete a budget",
    description="The runs it paused resume.",
    responses=responses(204, "Deleted", 400, 404, 503, content={}),
    tags=SPEND,
)
def delete_budget(scope: Scope) -> Response[None]:
    service.delete(tenant(router), scope)
    return Response(status_code=204)


@router.post(
    "/v1/runs/<run_id>/resume",
    summary="Resume a run its budget paused",
    description="409 `run_not_paused` for a run not paused on a budget; 409 `budget_exceeded` (with the "
    "budget, its spend and limit in `details`) while a budget still stops it.",
    responses=responses(200, "The run", 404, 409, 503),
    tags=SPEND,
)
def resume_run(run_id: RunId) -> Response[RunView]:
    run: Any = service.resume_run(tenant(router), run_id)
    return json_response(run.public())
