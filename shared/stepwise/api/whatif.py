"""/v1/runs/{id}/what-if and /v1/runs/{a}/compare/{b}: a recorded run replayed under a change, and two
runs side by side (see stepwise.evals)."""

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import RunId
from stepwise.api.responses import json_response, responses
from stepwise.evals import compare as comparing
from stepwise.evals.whatif import WhatIf, start_what_if
from stepwise.runs.models import RunView

router = APIGatewayHttpRouter()
RUNS = ["runs"]


@router.post(
    "/v1/runs/<run_id>/what-if",
    summary="Replay a run what-if",
    description="A new run of the same agent (or `agent_id`) on the same input and session history, with "
    "the overrides applied. Each tool call is served from the original's recorded result when it matches "
    "one (`match`: same tool and canonical arguments, or the next unused call of the tool), marked "
    "`served_from`; an unmatched read-only call runs live only with `live_reads: true`; any other "
    "unmatched call gets the error result `not_recorded` (an approval or client tool: `denied`, reason "
    "`what_if`) and counts as a divergence. Effects are never performed and nothing waits on a human. "
    'The run has `trigger: "what_if"`, `what_if_of` and the counters `served`, `live_reads` and '
    "`divergences`; it lives in a session of its own. 409 `run_active` while the original runs; 410 "
    "`input_gone` when its input or record is no longer stored.",
    responses=responses(201, "The what-if run", 400, 404, 409, 410, 413, 429, 503),
    tags=RUNS,
)
def what_if(run_id: RunId, body: WhatIf) -> Response[RunView]:
    return json_response(start_what_if(tenant(router), run_id, body).public(), 201)


@router.get(
    "/v1/runs/<run_id>/compare/<other_run_id>",
    summary="Compare two runs",
    description="Both trajectories (tool calls in order, each `matched`, `served`, `live`, `diverged` or "
    "`executed`), the final answers, steps, tokens, cost and wall time of each with deltas (the second "
    "minus the first), and the first divergence. 404 unless both runs are the tenant's.",
    responses=responses(200, "The comparison", 404),
    tags=RUNS,
)
def compare(run_id: RunId, other_run_id: RunId) -> Response[comparing.Comparison]:
    return json_response(comparing.compare(tenant(router), run_id, other_run_id).model_dump(mode="json"))
