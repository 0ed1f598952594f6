"""The light events function's resolver: only the routes a client keeps busy while it waits on a run
(stepwise.api.events', and the protocol doors' creates and streams: AG-UI, the Responses API,
A2A), so its import footprint stays small (see tests/unit/test_imports.py)."""

from functools import cache
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from stepwise.api import a2a, agui, events, openai_responses
from stepwise.api.resolver import new_resolver, refused


@cache
def build() -> APIGatewayHttpResolver:
    app = new_resolver()
    app.include_router(events.router)
    app.include_router(openai_responses.router)
    app.include_router(agui.router)
    app.include_router(a2a.router)
    return app


def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return refused(event) or build().resolve(event, context)
