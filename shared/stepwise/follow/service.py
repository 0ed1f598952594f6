"""The follow URL's life: issued by the API, admitted once by the WebSocket API's authorizer, then a
connection that gets its backlog and every later event until the run's terminal one."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from stepwise.approvals import links
from stepwise.core import aws, config
from stepwise.core.config import ConfigError
from stepwise.core.schema import Timestamp, utcnow
from stepwise.follow import delivery, sockets, tokens
from stepwise.follow import store as followers
from stepwise.follow.tokens import FollowClaims
from stepwise.runs.ports import stores

URL_ENV = config.Follow.variable("url")  # wss://{api-id}.execute-api.{region}.amazonaws.com/{stage}
# The backlog's invocation holds the new follower's lease this long: time to start and to wait for
# API Gateway to open the socket. Should it never run, writers take the follower over afterwards.
FLUSH_LEASE_SECONDS = 30.0
OPEN_TIMEOUT = 10.0
FLUSH_KEY = "stepwise_follow_flush"  # marks the self-invocation that sends a backlog


class FollowUrl(BaseModel):
    url: str
    expires_at: Timestamp


class Refused(Exception):
    """A connect the authorizer denies: forged, expired or already used. `reason` is for logs."""


def issue(tenant_id: str, run_id: str, after: int, now: datetime | None = None) -> FollowUrl:
    """A signed single-use URL to follow the run over a WebSocket; NotFound for another tenant's run."""
    store = stores()
    if store.events.head(tenant_id, run_id) is None:  # the head's key carries the tenant: it proves the run
        store.runs.get(tenant_id, run_id)
    claims = tokens.new_claims(tenant_id, run_id, after, now or utcnow())
    base = config.follow().url
    if not base:
        raise ConfigError(f"{URL_ENV} is not set: the WebSocket API's URL")
    token = tokens.sign(claims, links.secret())
    return FollowUrl(url=f"{base.rstrip('/')}?token={quote(token, safe='')}", expires_at=claims.expires_at)


def admit(token: str, now: datetime | None = None) -> FollowClaims:
    """The claims of a genuine, unexpired, unused URL, which is used up by this call; Refused otherwise."""
    try:
        claims = tokens.verify(token, links.verifying_secrets(), now or utcnow())
    except (links.ForgedLink, tokens.ExpiredFollowUrl) as exc:
        raise Refused(getattr(exc, "reason", exc.code)) from exc
    if not followers.use_token(claims.tenant_id, claims.run_id, claims.nonce, claims.expires_at):
        raise Refused("used before")
    return claims


@dataclass(frozen=True)
class Connection:
    connection_id: str
    tenant_id: str
    run_id: str
    after: int


def connected(connection: Connection, self_arn: str) -> None:
    """Record the follower (its lease held for the backlog), then have the backlog sent from a fresh
    invocation: API Gateway opens the socket only once this returns."""
    now = utcnow()
    followers.add(
        connection.tenant_id,
        connection.run_id,
        connection.connection_id,
        sent=connection.after,
        lease=time.time() + FLUSH_LEASE_SECONDS,
        now=now,
    )
    # Counted after its item exists, so a writer that sees the count finds the follower.
    head = stores().events.followed(connection.tenant_id, connection.run_id)
    payload = {
        FLUSH_KEY: {
            "connection_id": connection.connection_id,
            "tenant_id": connection.tenant_id,
            "run_id": connection.run_id,
            "catch_up": head.last_seq,
        }
    }
    aws.client("lambda").invoke(FunctionName=self_arn, InvocationType="Event", Payload=json.dumps(payload))


def flush(connection_id: str, tenant_id: str, run_id: str, catch_up: int = 0) -> None:
    """Send a new follower its backlog once its socket is open, then release it to the writers."""
    follower = followers.get(tenant_id, run_id, connection_id)
    if follower is None:
        return  # it disconnected already
    if not sockets.wait_open(connection_id, OPEN_TIMEOUT):
        followers.remove(tenant_id, run_id, connection_id)
        return
    delivery.deliver(tenant_id, run_id, connection_id, holding=follower.sent, catch_up=catch_up)


def disconnected(connection_id: str, tenant_id: str, run_id: str) -> None:
    followers.remove(tenant_id, run_id, connection_id)


def flush_request(event: dict[str, Any]) -> dict[str, Any] | None:
    """The backlog request `connected` sent itself, if `event` is one."""
    request = event.get(FLUSH_KEY)
    return request if isinstance(request, dict) else None
