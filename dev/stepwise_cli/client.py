"""Where the CLI points (the API's URL and key) and the SDK client it talks through: the CLI has no HTTP
client of its own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel

from stepwise_sdk import ApiConnectionError, ApiStatusError, RetryPolicy, Stepwise

LOCAL_KEY = "sk-local-dev"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
TIMEOUT = 30.0


@dataclass(frozen=True)
class Target:
    url: str
    key: str
    url_given: bool  # named on the command line: commands the CLI prints repeat it


def resolve_target(url: str | None, key: str | None, environ: Mapping[str, str]) -> Target:
    """The flags win, then STEPWISE_URL / STEPWISE_API_KEY, then the local stack `make run` starts."""
    resolved_url = url or environ.get("STEPWISE_URL") or f"http://127.0.0.1:{environ.get('PORT') or 3000}"
    resolved_key = (
        key or environ.get("STEPWISE_API_KEY") or environ.get("STEPWISE_LOCAL_API_KEY") or LOCAL_KEY
    )
    return Target(url=resolved_url.rstrip("/"), key=resolved_key, url_given=url is not None)


def connect(
    target: Target, transport: httpx.BaseTransport | None = None, retries: RetryPolicy | None = None
) -> Stepwise:
    return Stepwise(
        base_url=target.url,
        api_key=target.key,
        timeout=TIMEOUT,
        retries=retries,
        transport=transport,
        default_headers={"User-Agent": "stepwise-cli"},
    )


class Hinted(Exception):
    """An API error, and what to do about it when the command knows."""

    def __init__(self, error: ApiStatusError, hint: str) -> None:
        super().__init__(str(error))
        self.error, self.hint = error, hint


def error_body(exc: ApiStatusError) -> dict[str, Any]:
    return {"error": {"code": exc.code, "message": exc.message, "details": exc.details}, "status": exc.status}


def unreachable_hint(exc: ApiConnectionError) -> str:
    if urlsplit(exc.url).hostname in LOCAL_HOSTS:
        return "is the local stack running? Start it with `make run` (or point --url at a deployed stack)"
    return "check --url (or STEPWISE_URL)"


def data(model: BaseModel) -> dict[str, Any]:
    """A model the SDK parsed, as the API's JSON: the fields the API sent (new ones included)."""
    dumped: dict[str, Any] = model.model_dump(mode="json", exclude_unset=True)
    return dumped
