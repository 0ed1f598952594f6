"""The WebSocket API's connections, through API Gateway's management API (`@connections`)."""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import ClientError

from stepwise.core import aws, config
from stepwise.core.config import ConfigError

# https://{api-id}.execute-api.{region}.amazonaws.com/{stage}
ENDPOINT_ENV = config.Follow.variable("api_endpoint")


class Gone(Exception):
    """The client is no longer connected (or not connected yet)."""


def _client() -> Any:
    endpoint = config.follow().api_endpoint
    if not endpoint:
        raise ConfigError(f"{ENDPOINT_ENV} is not set: events cannot be pushed to followers")
    return aws.client("apigatewaymanagementapi", endpoint_url=endpoint)


def _gone(exc: ClientError) -> bool:
    return exc.response.get("Error", {}).get("Code") == "GoneException"


def post(connection_id: str, text: str) -> None:
    """Send one text message; raises Gone when the client left."""
    try:
        _client().post_to_connection(ConnectionId=connection_id, Data=text.encode())
    except ClientError as exc:
        if _gone(exc):
            raise Gone(connection_id) from exc
        raise


def close(connection_id: str) -> None:
    try:
        _client().delete_connection(ConnectionId=connection_id)
    except ClientError as exc:
        if not _gone(exc):
            raise


def wait_open(connection_id: str, timeout: float, interval: float = 0.05) -> bool:
    """Whether the connection is open within `timeout`: API Gateway opens it only once `$connect` has
    returned, and the backlog's invocation may start before that."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _client().get_connection(ConnectionId=connection_id)
            return True
        except ClientError as exc:
            if not _gone(exc):
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
