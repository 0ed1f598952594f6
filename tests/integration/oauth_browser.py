"""A person's browser through an OAuth authorization on the local stack: an httpx client with its own
cookie jar, whose requests to the API's public URL (STEPWISE_PUBLIC_URL) go to the gateway in process and
whose other requests (a fake authorization server on loopback) go over the network.

The `authorization_url` Stepwise answers is its start link: opening it sets the flow's cookie and
redirects to the authorization server; the callback the authorization server redirects back to is then
sent with that cookie, as a browser sends it. A second `Browser` is another person (an empty jar).
"""

from __future__ import annotations

import os
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlencode, urlparse

import httpx

from stepwise_local.stack import LocalStack

REDIRECTS = (301, 302, 303, 307, 308)


class _Routed(httpx.BaseTransport):
    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        public = httpx.URL(os.environ["STEPWISE_PUBLIC_URL"])
        self.origin = (public.host, public.port)
        self.network = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if (request.url.host, request.url.port) != self.origin:
            return self.network.handle_request(request)
        answer = self.stack.gateway.handle(
            request.method,
            request.url.raw_path.decode().partition("?")[0],
            request.url.query.decode(),
            list(request.headers.items()),
            request.read(),
        )
        return httpx.Response(answer.status, headers=answer.headers, content=answer.body)

    def close(self) -> None:
        self.network.close()


class Browser:
    def __init__(self, stack: LocalStack) -> None:
        self.public_url = os.environ["STEPWISE_PUBLIC_URL"]
        self.http = httpx.Client(transport=_Routed(stack), follow_redirects=False, timeout=30)
        self.set_cookies: list[str] = []  # every Set-Cookie the API answered, in order

    def get(self, url: str, headers: dict[str, str] | None = None) -> httpx.Response:
        """One request, no redirect followed (a path is the API's)."""
        target = url if "://" in url else f"{self.public_url}{url}"
        response = self.http.get(target, headers=headers)
        self.set_cookies += response.headers.get_list("set-cookie")
        return response

    def open(self, authorization_url: str) -> str:
        """Open Stepwise's start link: the authorization server's URL it redirects to."""
        response = self.get(authorization_url)
        assert response.status_code == 302, response.text
        return response.headers["location"]

    def approve(self, authorization_url: str) -> dict[str, str]:
        """Open the start link and let the authorization server approve at once: the callback's query."""
        response = self.get(self.open(authorization_url))
        assert response.status_code in REDIRECTS, response.text
        return query_of(response.headers["location"])

    def callback(
        self, path: str, params: dict[str, str], headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        """Come back to the callback `path` with `params`, and the cookies this browser holds."""
        response = self.get(f"{path}?{urlencode(params)}", headers)
        return response.status_code, response.text

    def cookie(self, name_prefix: str = "stepwise_oauth_") -> str | None:
        """The value of the flow cookie this browser holds now, if any."""
        found = [c for c in self.http.cookies.jar if c.name.startswith(name_prefix)]
        assert len(found) <= 1, found
        return found[0].value if found else None

    def close(self) -> None:
        self.http.close()


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(url).query).items()}


def parsed_cookie(header: str) -> dict[str, str | bool]:
    """A Set-Cookie header's name, value and attributes (lower-cased keys; flags as True)."""
    jar: SimpleCookie = SimpleCookie()
    jar.load(header)
    ((name, morsel),) = jar.items()
    attributes: dict[str, str | bool] = {"name": name, "value": morsel.value}
    attributes |= {key: value for key, value in morsel.items() if value}
    return attributes
