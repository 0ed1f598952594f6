"""/v1/evals: eval suites and their eval runs (see stepwise.evals). A suite's cases are recorded runs
(replayed what-if) or fresh messages; an eval run runs every case as one EvalRun execution and holds
each to the suite's assertions."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import EvalId, EvalRunId
from stepwise.api.responses import json_response, responses
from stepwise.evals import runner, suites
from stepwise.evals.runner import EvalRunAccepted, EvalRunCreate, EvalRunList, EvalRunView
from stepwise.evals.suites import EvalCasesAdded, EvalCasesFromRuns, EvalSuite, EvalSuiteCreate, EvalSuiteList
from stepwise.runs.eventlog import EventPage

router = APIGatewayHttpRouter()
EVALS = ["evals"]


@router.post(
    "/v1/evals",
    summary="Create an eval suite",
    description="`{name, agent_id, cases, assertions}`. A case is `{run_id}` (one of this tenant's "
    "ended runs, replayed what-if) or `{message, session_id?, attachments?, expected?, script?}` (a fresh "
    "run). Assertions (`contains`, `not_contains`, `regex` (RE2), `json_schema`, `tool_trajectory` with "
    "`match` EXACT | IN_ORDER | ANY_ORDER, `max_steps`, `max_cost_usd`, `max_input_tokens`, "
    "`no_divergence`, `judge`) apply to every case; a case may add its own.",
    responses=responses(201, "The suite, with its `eval_id`", 400, 404, 413),
    tags=EVALS,
)
def create_eval(body: EvalSuiteCreate) -> Response[EvalSuite]:
    suite = suites.create(tenant(router), body)
    return json_response(suite.model_dump(mode="json"), 201)


@router.get(
    "/v1/evals", summary="List eval suites", responses=responses(200, "The suites, newest first"), tags=EVALS
)
def list_evals() -> Response[EvalSuiteList]:
    return json_response(suites.list_suites(tenant(router)).model_dump(mode="json"))


@router.get(
    "/v1/evals/<eval_id>",
    summary="Get an eval suite",
    responses=responses(200, "The suite, its cases and assertions", 404),
    tags=EVALS,
)
def get_eval(eval_id: EvalId) -> Response[EvalSuite]:
    return json_response(suites.get(tenant(router), eval_id).model_dump(mode="json"))


@router.post(
    "/v1/evals/<eval_id>/cases:from-runs",
    summary="Add recorded runs as cases",
    description="This tenant's ended runs that match the filter (`agent_id` (else the suite's), `status`, "
    "`created_after`, `created_before`, `metadata_key`; newest first, at most `last`), or the runs named "
    "in `run_ids`, become `{run_id}` cases. A run of another tenant is a 404 like an unknown one.",
    responses=responses(200, "The run ids added and the suite's case count", 400, 404, 413),
    tags=EVALS,
)
def add_cases_from_runs(eval_id: EvalId, body: EvalCasesFromRuns) -> Response[EvalCasesAdded]:
    return json_response(suites.add_from_runs(tenant(router), eval_id, body).model_dump(mode="json"))


@router.post(
    "/v1/evals/<eval_id>/runs",
    summary="Run an eval suite",
    description="Runs every case as one EvalRun execution, `concurrency` at a time (default 4, capped by the "
    "tenant's active-run quota), with `overrides` (model, system_prompt, tools, temperature, max_steps, "
    "agent_id, match, live_reads) applied to each case's run; then scores the assertions.",
    responses=responses(202, "The eval run, started", 400, 404, 413, 503),
    tags=EVALS,
)
def start_eval_run(eval_id: EvalId, body: EvalRunCreate) -> Response[EvalRunAccepted]:
    return json_response(runner.start(tenant(router), eval_id, body).model_dump(mode="json"), 202)


@router.get(
    "/v1/evals/<eval_id>/runs",
    summary="List a suite's eval runs",
    description="Newest first, with pass rate, cost and flips but without the cases (get one for those).",
    responses=responses(200, "The eval runs", 404),
    tags=EVALS,
)
def list_eval_runs(eval_id: EvalId) -> Response[EvalRunList]:
    return json_response(runner.list_runs(tenant(router), eval_id).model_dump(mode="json"))


@router.get(
    "/v1/evals/<eval_id>/runs/<eval_run_id>",
    summary="Get an eval run",
    description="`status` (running | succeeded | failed), `done` of `total` cases; once scored, per case "
    "each assertion's result with its reason, the run id and the comparison with its baseline, and the "
    "pass rate, mean and p95 cost, input tokens and steps with their deltas from the baselines, and "
    "`flipped`: the cases that passed in the suite's previous eval run and fail now.",
    responses=responses(200, "The eval run", 404),
    tags=EVALS,
)
def get_eval_run(eval_id: EvalId, eval_run_id: EvalRunId) -> Response[EvalRunView]:
    return json_response(runner.get(tenant(router), eval_id, eval_run_id).model_dump(mode="json"))


@router.get(
    "/v1/evals/<eval_id>/runs/<eval_run_id>/events",
    summary="An eval run's events",
    description="`eval_run_started`, one `eval_case_completed` per case as its run ends, then "
    "`eval_run_completed`; the events after seq `after`, `next` is the `after` of the next call.",
    responses=responses(200, "A page of events", 404),
    tags=EVALS,
)
def get_eval_run_events(
    eval_id: EvalId, eval_run_id: EvalRunId, after: Annotated[int, Query(ge=0)] = 0
) -> Response[EventPage]:
    page = runner.read_events(tenant(router), eval_id, eval_run_id, after)
    return json_response(page.model_dump(mode="json"))
