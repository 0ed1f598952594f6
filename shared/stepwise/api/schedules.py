"""/v1/agents/{id}/schedules: create, list, delete. A schedule starts its agent on EventBridge
Scheduler's clock (see stepwise.schedules)."""

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import AgentId, ScheduleId
from stepwise.api.responses import json_response, responses
from stepwise.schedules import service
from stepwise.schedules.models import Schedule, ScheduleCreate, ScheduleList

router = APIGatewayHttpRouter()
SCHEDULES = ["schedules"]


@router.post(
    "/v1/agents/<agent_id>/schedules",
    summary="Schedule an agent",
    description="`expression` is an EventBridge Scheduler expression (`rate(...)`, `cron(...)`, `at(...)`) "
    "in `timezone`; each firing starts a run on `message`.",
    responses=responses(201, "The schedule, with its `schedule_id`", 400, 404, 413, 429, 503),
    tags=SCHEDULES,
)
def create_schedule(agent_id: AgentId, body: ScheduleCreate) -> Response[Schedule]:
    schedule = service.create(tenant(router), agent_id, body)
    return json_response(schedule.model_dump(mode="json"), 201)


@router.get(
    "/v1/agents/<agent_id>/schedules",
    summary="List an agent's schedules",
    responses=responses(200, "The schedules", 404),
    tags=SCHEDULES,
)
def list_schedules(agent_id: AgentId) -> Response[ScheduleList]:
    schedules = service.list_for_agent(tenant(router), agent_id)
    return json_response({"schedules": [s.model_dump(mode="json") for s in schedules]})


@router.delete(
    "/v1/agents/<agent_id>/schedules/<schedule_id>",
    summary="Delete a schedule",
    responses=responses(204, "Deleted", 404, content={}),
    tags=SCHEDULES,
)
def delete_schedule(agent_id: AgentId, schedule_id: ScheduleId) -> Response[None]:
    service.delete(tenant(router), agent_id, schedule_id)
    return Response(status_code=204)
