"""The API function's resolver: routers, authentication, body limits and the error mapping."""

import json
from functools import cache
from typing import Any, Literal

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer, Server
from pydantic import BaseModel

from stepwise.api import (
    a2a,
    agents,
    agui,
    approvals,
    console,
    evals,
    events,
    hooks,
    interactions,
    mcp_door,
    mcp_servers,
    memories,
    openai_responses,
    runs,
    schedules,
    sessions,
    settings,
    trigger_intake,
    triggers,
    uploads,
    usage,
    webhooks,
    whatif,
)
from stepwise.api.auth import PUBLIC
from stepwise.api.resolver import new_resolver, refused
from stepwise.api.responses import json_response, responses

TITLE = "Stepwise"
VERSION = "0.1.0"
DESCRIPTION = (
    "A serverless runtime for LLM agents: define agents, start runs, follow their events and answer the "
    "approvals and client tools they wait on.\n\n"
    "Every route but `/v1/health`, `/v1/console`, `/v1/approvals/*` and `/v1/integrations/*` needs "
    '`Authorization: Bearer <api key>`. Errors are `{"error": {"code", "message", "details"}}` '
    "(the `Error` schema); an id that belongs to another tenant is a 404, like one that does not exist."
)
# What the spec says about itself, the same at /v1/openapi.json and in the Swagger UI at /v1/docs.
SPEC_INFO: dict[str, Any] = {
    "title": TITLE,
    "version": VERSION,
    "description": DESCRIPTION,
    "security_schemes": {"apiKey": HTTPBearer(description="Authorization: Bearer <api key>")},
    "security": [{"apiKey": []}],
}


class Health(BaseModel):
    status: Literal["ok"]


@cache
def build() -> APIGatewayHttpResolver:
    app = new_resolver()
    app.include_router(agents.router)
    app.include_router(memories.router)
    app.include_router(runs.router)
    app.include_router(whatif.router)
    app.include_router(events.router)
    app.include_router(agui.router)  # served by the events function; here for the spec
    app.include_router(a2a.router)  # served by the events function; here for the spec
    app.include_router(sessions.router)
    app.include_router(interactions.router)
    app.include_router(hooks.router)
    app.include_router(mcp_servers.router)
    app.include_router(approvals.router)
    app.include_router(schedules.router)
    app.include_router(evals.router)
    app.include_router(usage.router)
    app.include_router(settings.router)
    app.include_router(webhooks.router)
    app.include_router(uploads.router)
    app.include_router(console.router)
    app.include_router(mcp_door.router)
    app.include_router(openai_responses.router)
    app.include_router(openai_responses.cancel_router)
    app.include_router(triggers.router)
    app.include_router(trigger_intake.router)  # served by the trigger intake function; here for the spec

    @app.get(
        "/v1/health",
        summary="Health check",
        description="Public: answers without a key.",
        responses=responses(200, "The API is up", public=True),
        tags=["health"],
        openapi_extensions=PUBLIC,
    )
    def health() -> Response[Health]:
        return json_response({"status": "ok"})

    @app.get("/v1/openapi.json", include_in_schema=False)
    def openapi() -> Response[dict[str, Any]]:
        return json_response(json.loads(spec(app)))

    app.enable_swagger(path="/v1/docs", **SPEC_INFO)
    return app


def spec(app: APIGatewayHttpResolver) -> str:
    return app.get_openapi_json_schema(servers=[Server(url="/")], **SPEC_INFO)


def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return refused(event) or build().resolve(event, context)
