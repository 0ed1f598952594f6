"""/v1/workflows: create, publish versions, read the compiled ASL, start runs, schedule them (see
stepwise.workflows and stepwise.schedules)."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.params import ScheduleId, WorkflowId
from stepwise.api.responses import json_response, responses
from stepwise.schedules import service as schedules
from stepwise.schedules.models import WorkflowSchedule, WorkflowScheduleCreate, WorkflowScheduleList
from stepwise.workflows import service, starting
from stepwise.workflows.models import (
    WorkflowAsl,
    WorkflowCreate,
    WorkflowList,
    WorkflowRunAccepted,
    WorkflowRunCreate,
    WorkflowVersions,
    WorkflowView,
)

router = APIGatewayHttpRouter()
WORKFLOWS = ["workflows"]
Version = Annotated[int | None, Query(ge=1, description="A published version; the latest without it")]


@router.post(
    "/v1/workflows",
    summary="Create a workflow",
    description="A graph of agents: nodes of type agent, sequential, parallel, map, loop, branch and "
    "approval, with templates (`{{input.x}}`, `{{nodes.<id>.output.field}}`, `{{item}}`) and conditions "
    "(`{path, equals | matches | exists}`). It is checked (422 naming the node: an unknown node, a "
    "reference cycle, a node that cannot have run yet), compiled to a Step Functions state machine and "
    "published as version 1. At most MaxWorkflows per tenant (429 `quota_exceeded`).",
    responses=responses(201, "The workflow, with its `workflow_id`", 400, 413, 429, 503),
    tags=WORKFLOWS,
)
def create_workflow(body: WorkflowCreate) -> Response[WorkflowView]:
    return json_response(service.create(tenant(router), body).model_dump(mode="json"), 201)


@router.get(
    "/v1/workflows", summary="List workflows", responses=responses(200, "The workflows"), tags=WORKFLOWS
)
def list_workflows() -> Response[WorkflowList]:
    return json_response(service.list_workflows(tenant(router)).model_dump(mode="json"))


@router.get(
    "/v1/workflows/<workflow_id>",
    summary="Get a workflow",
    description="At its latest version, or at `version`.",
    responses=responses(200, "The workflow", 404),
    tags=WORKFLOWS,
)
def get_workflow(workflow_id: WorkflowId, version: Version = None) -> Response[WorkflowView]:
    return json_response(service.get(tenant(router), workflow_id, version).model_dump(mode="json"))


@router.put(
    "/v1/workflows/<workflow_id>",
    summary="Publish a new version",
    description="The whole definition again; it is checked and compiled like a new one and becomes the "
    "latest version. Runs in progress keep the version they started on.",
    responses=responses(200, "The workflow at its new version", 400, 404, 409, 413, 503),
    tags=WORKFLOWS,
)
def publish_workflow(workflow_id: WorkflowId, body: WorkflowCreate) -> Response[WorkflowView]:
    return json_response(service.publish(tenant(router), workflow_id, body).model_dump(mode="json"))


@router.get(
    "/v1/workflows/<workflow_id>/versions",
    summary="List a workflow's versions",
    responses=responses(200, "The versions, oldest first", 404),
    tags=WORKFLOWS,
)
def list_versions(workflow_id: WorkflowId) -> Response[WorkflowVersions]:
    return json_response(service.versions(tenant(router), workflow_id).model_dump(mode="json"))


@router.get(
    "/v1/workflows/<workflow_id>/asl",
    summary="The compiled state machine",
    description="`{workflow_id, version, definition}`: the Amazon States Language the version runs as.",
    responses=responses(200, "The definition", 404),
    tags=WORKFLOWS,
)
def get_asl(workflow_id: WorkflowId, version: Version = None) -> Response[WorkflowAsl]:
    return json_response(service.asl(tenant(router), workflow_id, version).model_dump(mode="json"))


@router.delete(
    "/v1/workflows/<workflow_id>",
    summary="Delete a workflow",
    description="Its versions and their state machines go; runs already recorded stay.",
    responses=responses(204, "Deleted", 404, content={}),
    tags=WORKFLOWS,
)
def delete_workflow(workflow_id: WorkflowId) -> Response[None]:
    # Its schedules first, as an agent's go with it: nothing fires for a deleted workflow.
    for schedule in schedules.list_for_workflow(tenant(router), workflow_id):
        schedules.delete(tenant(router), workflow_id, schedule.schedule_id)
    service.delete(tenant(router), workflow_id)
    return Response(status_code=204)


@router.post(
    "/v1/workflows/<workflow_id>/schedules",
    summary="Schedule a workflow",
    description="`expression` is an EventBridge Scheduler expression (`rate(...)`, `cron(...)`, `at(...)`) "
    "in `timezone`; each firing starts a workflow run (of the latest version then) on `input`, which is "
    "checked against the workflow's input_schema now (422 `input_invalid`) and at each firing.",
    responses=responses(201, "The schedule, with its `schedule_id`", 400, 404, 413, 429, 503),
    tags=WORKFLOWS,
)
def create_workflow_schedule(
    workflow_id: WorkflowId, body: WorkflowScheduleCreate
) -> Response[WorkflowSchedule]:
    schedule = schedules.create_for_workflow(tenant(router), workflow_id, body)
    return json_response(schedule.model_dump(mode="json"), 201)


@router.get(
    "/v1/workflows/<workflow_id>/schedules",
    summary="List a workflow's schedules",
    responses=responses(200, "The schedules", 404),
    tags=WORKFLOWS,
)
def list_workflow_schedules(workflow_id: WorkflowId) -> Response[WorkflowScheduleList]:
    found = schedules.list_for_workflow(tenant(router), workflow_id)
    return json_response({"schedules": [s.model_dump(mode="json") for s in found]})


@router.delete(
    "/v1/workflows/<workflow_id>/schedules/<schedule_id>",
    summary="Delete a workflow's schedule",
    responses=responses(204, "Deleted", 404, content={}),
    tags=WORKFLOWS,
)
def delete_workflow_schedule(workflow_id: WorkflowId, schedule_id: ScheduleId) -> Response[None]:
    schedules.delete(tenant(router), workflow_id, schedule_id)
    return Response(status_code=204)


@router.post(
    "/v1/workflows/<workflow_id>/runs",
    summary="Run a workflow",
    description='Starts a workflow run (`kind: "workflow"`) on `version` (the latest without it); its '
    "node runs are its `children`. `input` is checked against the workflow's `input_schema` (422 "
    "`input_invalid`). Follow it at `/v1/runs/{run_id}/events`: `node_started`, `node_completed`, "
    "`node_failed`.",
    responses=responses(202, "The run's id", 400, 404, 409, 413, 429, 503),
    tags=WORKFLOWS,
)
def run_workflow(workflow_id: WorkflowId, body: WorkflowRunCreate) -> Response[WorkflowRunAccepted]:
    return json_response(starting.start(tenant(router), workflow_id, body).model_dump(mode="json"), 202)
