"""The HTTP side of the CLI: where the API is, with which key, and its answers or its errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

LOCAL_KEY = "sk-local-dev"
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
TIMEOUT = 30.0


class ApiFailure(Exception):
    """The API answered with an error: the contract's `{"error": {code, message, details}}`."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details
        self.hint: str | None = None  # what to do about it, when the command knows

    def body(self) -> dict[str, Any]:
        return {
            "error": {"code": self.code, "message": self.message, "details": self.details},
            "status": self.status,
        }


class Unreachable(Exception):
    """No HTTP answer at all: nothing listens there, DNS failed, or the request timed out."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url, self.reason = url, reason

    @property
    def hint(self) -> str:
        if urlsplit(self.url).hostname in LOCAL_HOSTS:
            return "is the local stack running? Start it with `make run` (or point --url at a deployed stack)"
        return "check --url (or STEPWISE_URL)"


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


def failure_from(response: httpx.Response) -> ApiFailure:
    """Reads the contract's error shape; anything else (API Gateway's own 401, a proxy's 502) still
    becomes a code and a message."""
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "code" in error:
        return ApiFailure(
            response.status_code, str(error["code"]), str(error.get("message", "")), error.get("details")
        )
    message = body.get("message") if isinstance(body, dict) else None
    text = str(message or response.text.strip() or response.reason_phrase)
    return ApiFailure(response.status_code, f"http_{response.status_code}", text[:500])


class Api:
    """A thin synchronous client: JSON in, JSON out, errors raised as ApiFailure or Unreachable."""

    def __init__(self, target: Target, transport: httpx.BaseTransport | None = None) -> None:
        self.target = target
        self._http = httpx.Client(
            base_url=target.url,
            headers={"Authorization": f"Bearer {target.key}", "User-Agent": "stepwise-cli"},
            timeout=TIMEOUT,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """The response's JSON (None for a 204); ApiFailure for any status of 400 or above."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(
                method,
                path,
                json=body,
                params=query,
                headers=dict(headers or {}),
                timeout=timeout if timeout is not None else TIMEOUT,
            )
        except httpx.ConnectError as exc:
            raise Unreachable(self.target.url, _reason(exc)) from None
        except httpx.TimeoutException:
            raise Unreachable(self.target.url, "the request timed out") from None
        except httpx.TransportError as exc:
            raise Unreachable(self.target.url, _reason(exc)) from None
        if response.status_code >= 400:
            raise failure_from(response)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise ApiFailure(
                response.status_code, "not_json", f"expected JSON from {path}, got {response.text[:200]!r}"
            ) from None

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.call("POST", path, body=body, **kwargs)

    def put(self, path: str, body: Any = None) -> Any:
        return self.call("PUT", path, body=body)

    def delete(self, path: str) -> Any:
        return self.call("DELETE", path)


def _reason(exc: Exception) -> str:
    text = str(exc)
    if "refused" in text.lower() or "errno 111" in text.lower():
        return "connection refused"
    return text or type(exc).__name__


def seg(value: str) -> str:
    """One path segment, escaped: an id typed on the command line cannot reach another route."""
    return quote(value, safe="")
