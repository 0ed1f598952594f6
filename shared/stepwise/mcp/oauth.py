"""The MCP authorization flow (OAuth 2.1 with PKCE) split across requests, as a server-side client runs it.

The SDK's `OAuthClientProvider` runs the whole flow inside one HTTP request: it waits, in process, for a
person to approve and for the redirect to come back. Stepwise cannot wait like that (a Lambda answers the
registration and a different one receives the callback, minutes later), so the flow is cut in three:

- `start`: probe the MCP server for its 401 challenge, discover its protected-resource metadata (RFC 9728)
  and its authorization server's metadata (RFC 8414), register a client (RFC 7591) unless one is given,
  and build the authorization URL with a PKCE challenge and a fresh `state`;
- `exchange`: trade the code the callback received for tokens, with the PKCE verifier;
- `refresh`: a new access token from the refresh token.

Every step is the SDK's own where it has one that does not assume the in-process wait: the discovery URL
orders, metadata parsing and issuer checks, the scope selection strategy, the registration request and
response handling, PKCE, and the token response models. All of it goes through the `httpx2` client it is
given (the SSRF-guarded one): the authorization server's URLs come from a server's metadata, so they are
checked like any other destination.
"""

from __future__ import annotations

import base64
import json
import secrets
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode, urlparse

import httpx2
import mcp_types
from mcp.client.auth import OAuthFlowError, OAuthRegistrationError, OAuthTokenError, PKCEParameters
from mcp.client.auth.oauth2 import check_registration_usable
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_client_registration_request,
    create_oauth_metadata_request,
    extract_field_from_www_auth,
    extract_resource_metadata_from_www_auth,
    extract_scope_from_www_auth,
    get_client_metadata_scopes,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    handle_registration_response,
    handle_token_response_scopes,
    union_scopes,
    validate_authorization_response_iss,
    validate_metadata_issuer,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata, OAuthToken
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from pydantic import BaseModel, ValidationError

from stepwise.core.schema import utcnow

CLIENT_NAME = "Stepwise"
GRANT_TYPES = ["authorization_code", "refresh_token"]
# A token that expires within this margin is refreshed before it is used, not after a 401.
REFRESH_MARGIN = timedelta(seconds=60)
# Preferred token endpoint authentication: a server-side client can keep a secret, so it takes one.
_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")

NEEDS_AUTHORIZATION = "mcp_needs_authorization"
DISCOVERY_FAILED = "mcp_oauth_discovery_failed"
NOT_REQUIRED = "mcp_oauth_not_required"
TOKEN_FAILED = "mcp_oauth_token_failed"


class OAuthFailure(Exception):
    """A step of the flow failed; `code` is stable, `message` says what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Grant(BaseModel):
    """What Stepwise holds for one MCP server: the client it is registered as, where to get tokens,
    and the tokens once a person has authorized. Stored only encrypted; never shown by the API."""

    client: OAuthClientInformationFull
    metadata: OAuthMetadata | None = None
    resource: str  # RFC 8707 resource indicator sent with every authorization and token request
    scope: str | None = None  # what was asked for; the union when a server asked for more
    tokens: OAuthToken | None = None
    expires_at: datetime | None = None

    def token_endpoint(self) -> str:
        if self.metadata is None:
            raise OAuthFailure(NEEDS_AUTHORIZATION, "the authorization server's metadata is unknown")
        return str(self.metadata.token_endpoint)

    def fresh(self, now: datetime | None = None) -> bool:
        """Whether the access token can be used as it is (known not to expire within the margin)."""
        if self.tokens is None:
            return False
        return self.expires_at is None or (now or utcnow()) + REFRESH_MARGIN < self.expires_at


class Pending(BaseModel):
    """An authorization a person has been sent to approve: the PKCE verifier and where the code goes."""

    code_verifier: str
    redirect_uri: str


class Started(BaseModel):
    authorization_url: str
    state: str
    grant: Grant
    pending: Pending


# --- start -----------------------------------------------------------------------------------------


async def start(
    http: httpx2.AsyncClient,
    server_url: str,
    redirect_uri: str,
    *,
    scopes: list[str] | None = None,
    client_id: str | None = None,
    client_secret: str | None = None,
    prior: Grant | None = None,
    client_name: str = CLIENT_NAME,
) -> Started:
    """Discover, register (or reuse `prior`'s client, or the tenant's `client_id`), and build the URL
    a person opens to authorize. `scopes` None follows the MCP scope selection strategy. A registered
    client is named `client_name`: the tenant's, so a consent screen says whose app asks.

    A client belongs to the authorization server it was registered with: `prior`'s client is reused only
    with the same issuer, and the tenant's `client_id` is refused once the server names another issuer
    than the one it was first authorized with (its secret is never sent anywhere else)."""
    challenge = await _challenge(http, server_url)
    www_scope = extract_scope_from_www_auth(challenge)
    prm_urls = build_protected_resource_metadata_discovery_urls(
        extract_resource_metadata_from_www_auth(challenge), server_url
    )
    prm = None
    for url in prm_urls:
        prm = await handle_protected_resource_response(await _send(http, create_oauth_metadata_request(url)))
        if prm is not None:
            break
    resource = resource_url_from_server_url(server_url)
    issuer: str | None = None
    if prm is not None:
        advertised = str(prm.resource)
        if not check_resource_allowed(requested_resource=resource, configured_resource=advertised):
            raise OAuthFailure(
                DISCOVERY_FAILED,
                f"the server's protected-resource metadata is for {advertised}, not {resource}",
            )
        resource = advertised
        issuer = str(prm.authorization_servers[0])
    metadata = await _authorization_server(http, issuer, server_url)

    if scopes is not None:
        scope: str | None = " ".join(scopes) or None
    else:
        scope = get_client_metadata_scopes(www_scope, prm, metadata, GRANT_TYPES)
    if prior is not None and prior.scope:
        scope = union_scopes(prior.scope, scope)  # a step-up keeps what was granted before
    if (
        challenge.status_code == 403
        and extract_field_from_www_auth(challenge, "error") == "insufficient_scope"
    ):
        scope = union_scopes(scope, www_scope)

    if client_id is not None and prior is not None and not same_issuer(prior, metadata):
        raise OAuthFailure(
            DISCOVERY_FAILED,
            f"the server now names the authorization server {metadata.issuer}, not the one auth.client_id "
            "was registered with: register the server again with a client of the new one",
        )
    client = _given_client(client_id, client_secret, redirect_uri, metadata)
    if client is None and prior is not None and same_issuer(prior, metadata):
        client = prior.client
    if client is None:
        client = await _register(http, metadata, server_url, redirect_uri, scope, client_name)

    pkce = PKCEParameters.generate()
    state = secrets.token_urlsafe(32)
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": pkce.code_challenge,
        "code_challenge_method": "S256",
        "resource": resource,
    }
    if scope:
        params["scope"] = scope
        if "offline_access" in scope.split():
            params["prompt"] = "consent"  # OIDC asks for it with offline_access
    endpoint = str(metadata.authorization_endpoint)
    separator = "&" if "?" in endpoint else "?"
    return Started(
        authorization_url=f"{endpoint}{separator}{urlencode(params)}",
        state=state,
        grant=Grant(client=client, metadata=metadata, resource=resource, scope=scope),
        pending=Pending(code_verifier=pkce.code_verifier, redirect_uri=redirect_uri),
    )


async def _challenge(http: httpx2.AsyncClient, server_url: str) -> httpx2.Response:
    """The server's 401 (or 403) with WWW-Authenticate to an unauthenticated client: to initialize, or,
    for a server that lets anyone initialize and guards only its operations, to tools/list."""
    # No MCP-Protocol-Version header: it belongs to requests after the version is negotiated.
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": mcp_types.LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": CLIENT_NAME, "version": "1"},
        },
    }
    response = await _send(http, httpx2.Request("POST", server_url, json=initialize, headers=headers))
    initialized = response.status_code < 400
    if initialized:
        session = response.headers.get("mcp-session-id")
        if session:
            headers["Mcp-Session-Id"] = session
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        response = await _send(http, httpx2.Request("POST", server_url, json=listing, headers=headers))
    if response.status_code in (401, 403):
        return response
    if initialized or response.status_code < 400:
        # It let an unauthenticated client in (what else it refuses is not about authorization).
        raise OAuthFailure(NOT_REQUIRED, "the MCP server answered without asking for authorization")
    raise OAuthFailure(DISCOVERY_FAILED, f"the MCP server answered HTTP {response.status_code}, not 401")


async def _authorization_server(
    http: httpx2.AsyncClient, issuer: str | None, server_url: str
) -> OAuthMetadata:
    for url in build_oauth_authorization_server_metadata_discovery_urls(issuer, server_url):
        ok, metadata = await handle_auth_metadata_response(
            await _send(http, create_oauth_metadata_request(url))
        )
        if not ok:
            break
        if metadata is not None:
            if issuer is not None:
                try:
                    validate_metadata_issuer(metadata, issuer)
                except OAuthFlowError as exc:
                    raise OAuthFailure(DISCOVERY_FAILED, str(exc)) from exc
            return metadata
    if issuer is None:
        # The 2025-03-26 spec's fallback for a server that publishes neither kind of metadata: the
        # authorization server is the MCP server's origin, at its default paths.
        parsed = urlparse(server_url)
        origin = f"{parsed.scheme}://{parsed.netloc}"
        return OAuthMetadata.model_validate(
            {
                "issuer": origin,
                "authorization_endpoint": f"{origin}/authorize",
                "token_endpoint": f"{origin}/token",
                "registration_endpoint": f"{origin}/register",
            }
        )
    raise OAuthFailure(DISCOVERY_FAILED, f"no authorization server metadata found for {issuer}")


def _given_client(
    client_id: str | None, client_secret: str | None, redirect_uri: str, metadata: OAuthMetadata
) -> OAuthClientInformationFull | None:
    """The tenant's pre-registered client, authenticating the way the server supports."""
    if client_id is None:
        return None
    method = "none"
    if client_secret is not None:
        supported = metadata.token_endpoint_auth_methods_supported or ["client_secret_basic"]
        method = next((m for m in _AUTH_METHODS[:2] if m in supported), "client_secret_basic")
    return OAuthClientInformationFull(
        client_id=client_id,
        client_secret=client_secret,
        token_endpoint_auth_method=method,
        redirect_uris=[redirect_uri],  # pydantic parses the URL
    )


def same_issuer(prior: Grant, metadata: OAuthMetadata | None) -> bool:
    return (
        prior.metadata is not None
        and metadata is not None
        and str(prior.metadata.issuer) == str(metadata.issuer)
    )


async def _register(
    http: httpx2.AsyncClient,
    metadata: OAuthMetadata,
    server_url: str,
    redirect_uri: str,
    scope: str | None,
    client_name: str,
) -> OAuthClientInformationFull:
    if metadata.registration_endpoint is None:
        raise OAuthFailure(
            DISCOVERY_FAILED,
            "the authorization server offers no dynamic client registration: give auth.client_id "
            "(and auth.client_secret) of a client registered there",
        )
    supported = metadata.token_endpoint_auth_methods_supported or ["client_secret_basic"]
    method = next((m for m in _AUTH_METHODS if m in supported), "client_secret_basic")
    client_metadata = OAuthClientMetadata(
        client_name=client_name,
        redirect_uris=[redirect_uri],  # pydantic parses the URL
        grant_types=GRANT_TYPES,
        response_types=["code"],
        token_endpoint_auth_method=method,
        scope=scope,
        application_type="web",  # the redirect goes to Stepwise's API, not a loopback app
    )
    request = create_client_registration_request(metadata, client_metadata, server_url)
    try:
        client = await handle_registration_response(await _send(http, request))
        check_registration_usable(client)
    except OAuthRegistrationError as exc:
        raise OAuthFailure(DISCOVERY_FAILED, f"client registration failed: {exc}") from exc
    return client


# --- exchange and refresh ---------------------------------------------------------------------------


async def exchange(
    http: httpx2.AsyncClient, grant: Grant, pending: Pending, code: str, iss: str | None = None
) -> Grant:
    """The grant with tokens for `code` (the callback's), proven with the PKCE verifier."""
    try:
        validate_authorization_response_iss(iss, grant.metadata)
    except OAuthFlowError as exc:
        raise OAuthFailure(TOKEN_FAILED, str(exc)) from exc
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": pending.redirect_uri,
        "client_id": grant.client.client_id,
        "code_verifier": pending.code_verifier,
        "resource": grant.resource,
    }
    response = await _token_request(http, grant, data)
    if response.status_code not in (200, 201):
        raise OAuthFailure(TOKEN_FAILED, f"the token endpoint refused the code: {await _error(response)}")
    return _with_tokens(grant, await _tokens(response))


async def refresh(http: httpx2.AsyncClient, grant: Grant) -> Grant:
    """The grant with a refreshed access token; OAuthFailure(NEEDS_AUTHORIZATION) when refused."""
    if grant.tokens is None or not grant.tokens.refresh_token:
        raise OAuthFailure(NEEDS_AUTHORIZATION, "the access token expired and there is no refresh token")
    data = {
        "grant_type": "refresh_token",
        "refresh_token": grant.tokens.refresh_token,
        "client_id": grant.client.client_id,
        "resource": grant.resource,
    }
    response = await _token_request(http, grant, data)
    if response.status_code != 200:
        raise OAuthFailure(
            NEEDS_AUTHORIZATION, f"refreshing the access token failed: {await _error(response)}"
        )
    tokens = await _tokens(response)
    # RFC 6749 §6: an unchanged scope and a refresh token that is not rotated may be left out.
    tokens.refresh_token = tokens.refresh_token or grant.tokens.refresh_token
    tokens.scope = tokens.scope or grant.tokens.scope
    return _with_tokens(grant, tokens)


async def _token_request(http: httpx2.AsyncClient, grant: Grant, data: dict[str, str]) -> httpx2.Response:
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
    client = grant.client
    # RFC 6749 §2.3.1: client_secret_basic form-encodes id and secret before base64.
    if client.token_endpoint_auth_method == "client_secret_basic" and client.client_secret:
        pair = f"{quote(client.client_id, safe='')}:{quote(client.client_secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    elif client.token_endpoint_auth_method == "client_secret_post" and client.client_secret:
        data = {**data, "client_secret": client.client_secret}
    return await _send(http, httpx2.Request("POST", grant.token_endpoint(), data=data, headers=headers))


async def _tokens(response: httpx2.Response) -> OAuthToken:
    try:
        return await handle_token_response_scopes(response)
    except (OAuthTokenError, ValidationError, ValueError) as exc:
        raise OAuthFailure(TOKEN_FAILED, f"the token endpoint's answer is not a token: {exc}") from exc


def _with_tokens(grant: Grant, tokens: OAuthToken) -> Grant:
    tokens.scope = tokens.scope or grant.scope
    expires_at = utcnow() + timedelta(seconds=tokens.expires_in) if tokens.expires_in is not None else None
    return grant.model_copy(update={"tokens": tokens, "expires_at": expires_at})


async def _error(response: httpx2.Response) -> str:
    body = (await response.aread()).decode(errors="replace")[:300]
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        return f"HTTP {response.status_code} {body}".strip()
    if isinstance(parsed, dict) and parsed.get("error"):
        detail = parsed.get("error_description")
        return f"HTTP {response.status_code} {parsed['error']}" + (f": {detail}" if detail else "")
    return f"HTTP {response.status_code}"


async def _send(http: httpx2.AsyncClient, request: httpx2.Request) -> httpx2.Response:
    # No redirects: a metadata or token endpoint that moves is not followed off its origin silently.
    response = await http.send(request, follow_redirects=False)
    await response.aread()
    return response
