"""The WebSocket API's events, as API Gateway sends them to the events function: the `$connect`
route's REQUEST authorizer, `$connect`, `$disconnect`; plus the backlog's self-invocation."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from stepwise.core.observability import logger
from stepwise.follow import service

Kind = Literal["http", "authorize", "connect", "disconnect", "flush"]


class _Authorizer(BaseModel):
    """What the authorizer put in its context: API Gateway hands it to `$connect` and `$disconnect`."""

    tenant_id: str = Field(min_length=1)
    run_id: str = Field(min_length=1)
    after: int = Field(ge=0)


class _Context(BaseModel):
    connectionId: str = Field(min_length=1)
    authorizer: _Authorizer


def kind(event: dict[str, Any]) -> Kind:
    if service.flush_request(event) is not None:
        return "flush"
    if event.get("type") == "REQUEST" and "methodArn" in event:
        return "authorize"
    event_type = (event.get("requestContext") or {}).get("eventType")
    if event_type == "CONNECT":
        return "connect"
    if event_type == "DISCONNECT":
        return "disconnect"
    return "http"


def _policy(effect: str, resource: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
    statement = {"Action": "execute-api:Invoke", "Effect": effect, "Resource": resource}
    policy: dict[str, Any] = {
        "principalId": "follower",
        "policyDocument": {"Version": "2012-10-17", "Statement": [statement]},
    }
    if context:
        policy["context"] = context
    return policy


def authorize(event: dict[str, Any]) -> dict[str, Any]:
    """Allow a genuine, unexpired, unused follow URL (and use it up); deny anything else (403)."""
    token = (event.get("queryStringParameters") or {}).get("token") or ""
    resource = str(event["methodArn"])
    try:
        claims = service.admit(token)
    except service.Refused as refused:
        logger.info("follow URL refused", extra={"reason": str(refused)})
        return _policy("Deny", resource)
    context = {"tenant_id": claims.tenant_id, "run_id": claims.run_id, "after": claims.after}
    return _policy("Allow", resource, context)


def _connection(event: dict[str, Any]) -> service.Connection | None:
    try:
        ctx = _Context.model_validate(event.get("requestContext") or {})
    except ValidationError:
        return None
    auth = ctx.authorizer
    return service.Connection(ctx.connectionId, auth.tenant_id, auth.run_id, auth.after)


def connect(event: dict[str, Any], self_arn: str) -> dict[str, Any]:
    connection = _connection(event)
    if connection is None:  # only reachable past the authorizer, which always sets the context
        return {"statusCode": 403}
    service.connected(connection, self_arn)
    return {"statusCode": 200}


def disconnect(event: dict[str, Any]) -> dict[str, Any]:
    connection = _connection(event)
    if connection is not None:
        service.disconnected(connection.connection_id, connection.tenant_id, connection.run_id)
    return {"statusCode": 200}


def flush(event: dict[str, Any]) -> dict[str, Any]:
    request = service.flush_request(event) or {}
    service.flush(
        request["connection_id"], request["tenant_id"], request["run_id"], int(request.get("catch_up", 0))
    )
    return {}
