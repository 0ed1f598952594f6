"""The fake MCP server (tests.fakes.mcp_server) behind OAuth 2.1, with its own authorization server on the
same loopback origin: protected-resource metadata (RFC 9728), authorization server metadata (RFC 8414),
dynamic client registration (RFC 7591), an authorization endpoint that approves at once (the person who
clicks), and a token endpoint that checks PKCE (S256), the client's secret (client_secret_basic), the
redirect URI and the resource indicator, and issues expiring access tokens and refresh tokens.

Knobs for tests: `access_ttl` (seconds an access token lives), `revoke()` (every token stops working, as
when a user disconnects the app), `required_scope` (tools/call needs it, else 403 insufficient_scope),
`authorization_server` (the origin its protected-resource metadata names, when not its own).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.fakes.mcp_server import FakeMcpServer

SCOPES = ["mcp:read", "mcp:write"]


class FakeOAuthMcpServer(FakeMcpServer):
    def __init__(self, *, access_ttl: int = 3600, registration: bool = True) -> None:
        self.access_ttl = access_ttl
        self.registration = registration
        self.required_scope: str | None = None
        self.authorization_server: str | None = None
        # Where a browser is sent to approve, when not the issuer's origin (e.g. `localhost` for the same
        # server: another site than the API's 127.0.0.1, as a real authorization server is)
        self.authorize_origin: str | None = None
        self.clients: dict[str, dict[str, Any]] = {}
        self.codes: dict[str, dict[str, Any]] = {}
        self.access: dict[str, tuple[float, str]] = {}  # token -> (expires at, scope)
        self.refresh: dict[str, tuple[str, str]] = {}  # token -> (client id, scope)
        self.authorize_requests: list[dict[str, str]] = []
        self.token_requests: list[dict[str, str]] = []
        self.before_token: Callable[[], None] | None = None  # what else happens while a token is asked for
        self._auth_lock = threading.Lock()
        super().__init__()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add_client(self, client_id: str, client_secret: str) -> None:
        """A client registered out of band (a tenant's own `client_id`/`client_secret`)."""
        self.clients[client_id] = {"client_secret": client_secret, "method": "client_secret_basic"}

    def revoke(self) -> None:
        with self._auth_lock:
            self.access.clear()
            self.refresh.clear()

    def grants(self, grant_type: str) -> list[dict[str, str]]:
        return [r for r in self.token_requests if r.get("grant_type") == grant_type]

    # --- the MCP endpoint, guarded ------------------------------------------------------------------

    def _guarded(self, app: ASGIApp) -> ASGIApp:
        oauth = Router(
            routes=[
                Route("/.well-known/oauth-protected-resource/mcp", self._prm),
                Route("/.well-known/oauth-authorization-server", self._metadata),
                Route("/register", self._register, methods=["POST"]),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST"]),
            ]
        )

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["path"] != "/mcp":
                await (oauth if scope["type"] == "http" else app)(scope, receive, send)
                return
            self.requests += 1
            sent = dict(scope["headers"]).get(b"authorization", b"").decode()
            token = sent.removeprefix("Bearer ") if sent.startswith("Bearer ") else ""
            with self._auth_lock:
                expires_at, granted = self.access.get(token, (0.0, ""))
            challenge = f'Bearer resource_metadata="{self.origin}/.well-known/oauth-protected-resource/mcp"'
            if expires_at < time.time():
                await Response(status_code=401, headers={"WWW-Authenticate": challenge})(scope, receive, send)
                return
            if self.required_scope and self.required_scope not in granted.split():
                body = await _body(receive)
                if b'"tools/call"' in body:
                    header = f'Bearer error="insufficient_scope", scope="{self.required_scope}"'
                    await Response(status_code=403, headers={"WWW-Authenticate": header})(
                        scope, receive, send
                    )
                    return
                receive = _replay(body, receive)
            await app(scope, receive, send)

        return guarded

    # --- the authorization server ---------------------------------------------------------------------

    async def _prm(self, request: Request) -> Response:
        return JSONResponse(
            {
                "resource": self.url,
                "authorization_servers": [self.authorization_server or self.origin],
                "scopes_supported": SCOPES,
            }
        )

    async def _metadata(self, request: Request) -> Response:
        metadata: dict[str, Any] = {
            "issuer": self.origin,
            "authorization_endpoint": f"{self.authorize_origin or self.origin}/authorize",
            "token_endpoint": f"{self.origin}/token",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
            "scopes_supported": SCOPES,
        }
        if self.registration:
            metadata["registration_endpoint"] = f"{self.origin}/register"
        return JSONResponse(metadata)

    async def _register(self, request: Request) -> Response:
        body = await request.json()
        client_id, secret = f"client-{secrets.token_hex(4)}", secrets.token_urlsafe(16)
        with self._auth_lock:
            self.clients[client_id] = {
                "client_secret": secret,
                "redirect_uris": body["redirect_uris"],
                "client_name": body.get("client_name"),
            }
        return JSONResponse(
            {
                **body,
                "client_id": client_id,
                "client_secret": secret,
                "token_endpoint_auth_method": "client_secret_basic",
            },
            status_code=201,
        )

    async def _authorize(self, request: Request) -> Response:
        query = dict(request.query_params)
        self.authorize_requests.append(query)
        if query.get("client_id") not in self.clients or query.get("code_challenge_method") != "S256":
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        code = secrets.token_urlsafe(16)
        with self._auth_lock:
            self.codes[code] = query
        target = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query['state']})}"
        return RedirectResponse(target, status_code=302)

    async def _token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.token_requests.append(form)
        if self.before_token is not None:
            self.before_token()
        client_id = self._client(request.headers.get("authorization", ""))
        if client_id is None:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        with self._auth_lock:
            if form.get("grant_type") == "authorization_code":
                asked = self.codes.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "").encode()
                challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=").decode()
                if (
                    asked is None
                    or asked["client_id"] != client_id
                    or asked["code_challenge"] != challenge
                    or asked["redirect_uri"] != form.get("redirect_uri")
                    or form.get("resource") != self.url
                ):
                    return JSONResponse({"error": "invalid_grant"}, status_code=400)
                scope = asked.get("scope", "")
            elif form.get("grant_type") == "refresh_token":
                held = self.refresh.pop(form.get("refresh_token", ""), None)
                if held is None or held[0] != client_id:
                    return JSONResponse(
                        {"error": "invalid_grant", "error_description": "revoked"}, status_code=400
                    )
                scope = held[1]
            else:
                return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
            access, refresh = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
            self.access[access] = (time.time() + self.access_ttl, scope)
            self.refresh[refresh] = (client_id, scope)  # rotated: the old refresh token is spent
        return JSONResponse(
            {
                "access_token": access,
                "token_type": "bearer",
                "expires_in": self.access_ttl,
                "refresh_token": refresh,
                "scope": scope,
            }
        )

    def _client(self, header: str) -> str | None:
        if not header.startswith("Basic "):
            return None
        client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        known = self.clients.get(client_id)
        return client_id if known is not None and known["client_secret"] == secret else None


async def _body(receive: Receive) -> bytes:
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def _replay(body: bytes, then: Receive) -> Receive:
    """The request's body once more, then the connection's own messages (its disconnect)."""
    sent = False

    async def receive() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await then()

    return receive
