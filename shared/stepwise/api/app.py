"""The API function's routes: a table of route modules, each loaded on the first request for it (see
stepwise.api.routing), then authentication, body limits and the error mapping (stepwise.api.resolver)."""

import json
from typing import TYPE_CHECKING, Any

from stepwise.api.routing import LazyRoutes, routes

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

# Every route module of the API function, one line each: its name under stepwise.api and the path
# globs its routes answer (`*` one segment, a final `**` the prefix and anything below). Nothing is
# imported here: a request loads the modules its path picks (stepwise.api.routing). The order is the
# spec's. A new module is one line at the end; tests/contract/test_lazy_routes.py says which globs it
# needs if they are missing or wrong.
# fmt: off
ROUTES = (
    routes("agents", "/v1/agents", "/v1/agents/*", "/v1/agents/*/tool-usage", "/v1/agents/*/tools/**", "/v1/agents/*/weight"),  # noqa: E501
    routes("memories", "/v1/agents/*/memories/**"),
    routes("runs", "/v1/agents/*/run", "/v1/agents/*/runs", "/v1/runs", "/v1/runs/*", "/v1/runs/*/attachments", "/v1/runs/*/cancel", "/v1/runs/*/replay", "/v1/runs:cancel"),  # noqa: E501
    routes("whatif", "/v1/runs/*/compare/*", "/v1/runs/*/what-if"),
    routes("events", "/v1/runs/*/events", "/v1/runs/*/follow", "/v1/runs/*/stream"),
    routes("agui", "/v1/agents/*/ag-ui"),  # served by the events function; here for the spec
    routes("a2a", "/a2a/**"),  # served by the events function; here for the spec
    routes("sessions", "/v1/sessions/*"),
    routes("interactions", "/v1/runs/*/approve", "/v1/sessions/*/interactions", "/v1/sessions/interactions/*/respond"),  # noqa: E501
    routes("hooks", "/v1/agents/*/hooks/**"),
    routes("mcp_servers", "/v1/agents/*/mcp-servers/**", "/v1/integrations/mcp/**"),
    routes("approvals", "/v1/approvals/*", "/v1/integrations/slack/**"),
    routes("schedules", "/v1/agents/*/schedules/**"),
    routes("evals", "/v1/evals/**"),
    routes("usage", "/v1/budgets/**", "/v1/runs/*/resume", "/v1/usage"),
    routes("settings", "/v1/settings/**"),
    routes("webhooks", "/v1/runs/*/webhooks", "/v1/webhooks/**"),
    routes("uploads", "/v1/uploads"),
    routes("console", "/v1/console/**"),
    routes("mcp_door", "/v1/mcp"),
    routes("openai_responses", "/v1/responses/**", routers=("router", "cancel_router")),
    routes("health", "/v1/health"),
    routes("effects", "/v1/effects", "/v1/effects/*/resolve"),
    routes("workflows", "/v1/workflows/**"),
    routes("triggers", "/v1/triggers", "/v1/triggers/*", "/v1/triggers/*/deliveries", "/v1/triggers/*/secret", "/v1/integrations/gmail/oauth/**"),  # noqa: E501
    # The public intakes: served by TriggerIntakeFunction, here for the spec.
    routes("trigger_intake", "/v1/triggers/*/in", "/v1/integrations/ses", "/v1/integrations/gmail/push"),
)
# fmt: on

TITLE = "Stepwise"
VERSION = "0.1.0"
DESCRIPTION = (
    "A serverless runtime for LLM agents: define agents, start runs, follow their events and answer the "
    "approvals and client tools they wait on.\n\n"
    "Every route but `/v1/health`, `/v1/console`, `/v1/approvals/*` and `/v1/integrations/*` needs "
    '`Authorization: Bearer <api key>`. Errors are `{"error": {"code", "message", "details"}}` '
    "(the `Error` schema); an id that belongs to another tenant is a 404, like one that does not exist."
)
BEARER = "Authorization: Bearer <api key>"
# What the spec says about itself, the same at /v1/openapi.json and in the Swagger UI at /v1/docs (its
# security scheme is a Powertools model, so it is made where Powertools is imported: spec_info()).
SPEC_INFO: dict[str, Any] = {
    "title": TITLE,
    "version": VERSION,
    "description": DESCRIPTION,
    "security": [{"apiKey": []}],
}


def _new() -> "APIGatewayHttpResolver":
    from stepwise.api.resolver import new_resolver

    return new_resolver()


def _spec_routes(app: "APIGatewayHttpResolver") -> None:
    """What only the resolver with every module has: the spec it generates from them, and its UI."""
    from aws_lambda_powertools.event_handler import Response

    from stepwise.api.responses import json_response

    @app.get("/v1/openapi.json", include_in_schema=False)
    def openapi() -> Response[dict[str, Any]]:
        return json_response(json.loads(spec(app)))

    app.enable_swagger(path="/v1/docs", **spec_info())


API = LazyRoutes(ROUTES, new=_new, finish=_spec_routes)


def build() -> "APIGatewayHttpResolver":
    """The resolver with every route module (the spec's); requests use API.for_event's."""
    return API.full()


def spec(app: "APIGatewayHttpResolver") -> str:
    from aws_lambda_powertools.event_handler.openapi.models import Server

    return app.get_openapi_json_schema(servers=[Server(url="/")], **spec_info())


def spec_info() -> dict[str, Any]:
    from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer

    return {**SPEC_INFO, "security_schemes": {"apiKey": HTTPBearer(description=BEARER)}}


def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from stepwise.api.resolver import refused

    return refused(event) or API.for_event(event).resolve(event, context)
