"""The light events function's resolver: only stepwise.api.events' routes, so its import footprint
stays small (see tests/unit/test_imports.py)."""

from functools import cache
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from stepwise.api import events
from stepwise.api.resolver import install_error_handlers, refused


@cache
def build() -> APIGatewayHttpResolver:
    app = APIGatewayHttpResolver(enable_validation=True)
    app.include_router(events.router)
    install_error_handlers(app)
    return app


def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return refused(event) or build().resolve(event, context)
