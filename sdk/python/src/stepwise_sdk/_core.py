"""What the sync and async clients share: an operation of the API, one call of it, when a failed call
is sent again, and how an answer becomes a model or an error. Only the sending differs between them."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from stepwise_sdk.errors import InvalidResponse, StepwiseError, error_from, retry_after

T = TypeVar("T")

VERSION = "0.1.0"

DEFAULT_TIMEOUT = 30.0
# Safe to send twice by HTTP's definition; a POST is safe only with an Idempotency-Key the API honours.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass(frozen=True)
class Operation(Generic[T]):
    """One route of `/v1/openapi.json`: `response` is the success body's type (None for a 204), `body`
    the request body's model. tests/contract/test_sdk_models.py holds each against the spec."""

    method: str
    path: str  # with `{name}` placeholders, as the spec writes it
    response: Any
    body: Any = None  # a model, or a union of models (a tool)

    def call(
        self,
        path_params: Mapping[str, str] | None = None,
        *,
        body: BaseModel | Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Call[T]:
        # Each id is one escaped segment: an id cannot reach another route.
        path = self.path.format_map({k: quote(str(v), safe="") for k, v in (path_params or {}).items()})
        payload = None
        if self.body is not None:
            # Validated here, so a misspelt or missing field fails before any request; only the fields
            # that were set are sent, so the server's defaults apply to the rest.
            adapter = _adapter(self.body)
            model = adapter.validate_python(body if isinstance(body, BaseModel) else dict(body or {}))
            payload = adapter.dump_python(model, mode="json", exclude_unset=True)
        query = {k: _query_value(v) for k, v in (params or {}).items() if v is not None}
        return Call(self, path, payload, query, dict(headers or {}), timeout)


def _query_value(value: Any) -> Any:
    return ("true" if value else "false") if isinstance(value, bool) else value


@dataclass(frozen=True)
class Call(Generic[T]):
    operation: Operation[T]
    path: str
    json: Any
    params: dict[str, Any]
    headers: dict[str, str]
    timeout: float | None

    @property
    def idempotent(self) -> bool:
        return self.operation.method in IDEMPOTENT_METHODS or any(
            name.lower() == IDEMPOTENCY_HEADER.lower() for name in self.headers
        )

    def parse(self, response: httpx.Response) -> T:
        if self.operation.response is None or response.status_code == 204:
            return None  # type: ignore[return-value]  # the operation's T is None
        try:
            parsed: T = _adapter(self.operation.response).validate_json(response.content)
        except ValidationError as exc:
            raise InvalidResponse(
                f"{self.operation.method} {self.path} answered {response.status_code} with a body that "
                f"does not match the spec: {exc.error_count()} problem(s)",
                details={"errors": exc.errors(include_url=False, include_input=False)},
            ) from None
        return parsed


@cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


@dataclass(frozen=True)
class RetryPolicy:
    """Failed idempotent calls are sent again after 429, 5xx and broken connections, with exponential
    backoff and jitter, or after the server's Retry-After when it names one (capped at `max_delay`).
    A call that never reached the server (connection refused) is sent again whatever its method."""

    max_retries: int = 2
    initial_delay: float = 0.5
    max_delay: float = 8.0
    jitter: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def backoff(self, attempt: int, server_says: float | None = None) -> float:
        if server_says is not None:
            return min(server_says, self.max_delay)
        ceiling = min(self.max_delay, self.initial_delay * 2**attempt)
        return ceiling / 2 + self.jitter.uniform(0, ceiling / 2)

    def after_response(self, call: Call[Any], attempt: int, response: httpx.Response) -> float | None:
        """Seconds to wait before sending `call` again, or None to raise the response's error."""
        if attempt >= self.max_retries or not call.idempotent:
            return None
        if response.status_code not in RETRIED_STATUSES:
            return None
        return self.backoff(attempt, retry_after(response))

    def after_failure(self, call: Call[Any], attempt: int, exc: httpx.TransportError) -> float | None:
        """Seconds to wait before sending `call` again after no answer, or None to raise."""
        if attempt >= self.max_retries:
            return None
        never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
        return self.backoff(attempt) if never_sent or call.idempotent else None


def check(call: Call[T], response: httpx.Response) -> T:
    if response.status_code >= 400:
        raise error_from(response)
    return call.parse(response)


Body = BaseModel | Mapping[str, Any] | None


def merge(body: Body, fields: Mapping[str, Any]) -> Body:
    """A body given as a model or a mapping, and keywords on top of it."""
    if not fields:
        return body
    if isinstance(body, BaseModel):
        return {**body.model_dump(exclude_unset=True), **fields}
    return {**(body or {}), **fields}


def dump(model: BaseModel | None) -> Any:
    """A model as the API's JSON (the fields a newer server added included)."""
    return None if model is None else model.model_dump(mode="json")


# --- configuration ---------------------------------------------------------------------------------


def resolve(base_url: str | None, api_key: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The arguments, else STEPWISE_URL and STEPWISE_API_KEY; no silent default for either."""
    url = base_url or environ.get("STEPWISE_URL")
    key = api_key or environ.get("STEPWISE_API_KEY")
    if not url:
        raise StepwiseError("pass base_url= or set STEPWISE_URL", code="missing_base_url")
    if not key:
        raise StepwiseError("pass api_key= or set STEPWISE_API_KEY", code="missing_api_key")
    return url.rstrip("/"), key


def headers(api_key: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "User-Agent": f"stepwise-sdk/{VERSION}", **(extra or {})}
