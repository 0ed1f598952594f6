"""TriggerIntakeFunction's resolver: the public webhook intake alone, so its import footprint and its
rights stay those of its table, queue and key (see stepwise.triggers.intake)."""

import json
from functools import cache
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

from stepwise.api import trigger_intake
from stepwise.api.resolver import new_resolver
from stepwise.triggers import intake


@cache
def build() -> APIGatewayHttpResolver:
    app = new_resolver()
    app.include_router(trigger_intake.router)
    return app


def _too_large(event: dict[str, Any]) -> dict[str, Any] | None:
    """Over 1 MB: counted on the trigger and refused before the body is decoded or routed."""
    body = event.get("body") or ""
    size = len(body) * 3 // 4 if event.get("isBase64Encoded") else len(body.encode())
    if size <= intake.MAX_BODY:
        return None
    trigger_id = str((event.get("pathParameters") or {}).get("trigger_id") or "")
    if trigger_id.startswith("trg_"):
        intake.store.count_refusal(trigger_id, "too_large")
    error = {
        "code": "payload_too_large",
        "message": f"the body is over {intake.MAX_BODY} bytes",
        "details": {},
    }
    return {
        "statusCode": 413,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"error": error}),
        "isBase64Encoded": False,
    }


def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _too_large(event) or build().resolve(event, context)
