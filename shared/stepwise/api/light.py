"""The light events function's resolver: only the routes a client keeps busy while it waits on a run
(stepwise.api.events', and the protocol doors' creates and streams: the Responses door's and the A2A
door's), so its import footprint stays small (see tests/unit/test_imports.py)."""

from functools import cache
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from stepwise.api import a2a, events, openai_responses
from stepwise.api.resolver import new_resolver, refused


@cache
def build() -> APIGatewayHttpResolver:
    app = new_resolver()
    app.include_router(events.router)
    app.include_router(openai_responses.router)
    app.include_router(a2a.router)
    return app


def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return refused(event) or build().resolve(event, context)
