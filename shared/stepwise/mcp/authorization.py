"""MCP servers behind OAuth, for a tenant: start an authorization, complete it from the callback, and hand
calls a fresh access token (refreshing it before it expires, and once more when the server answers 401).

The grants and the authorizations in flight live behind `GrantStore` (stepwise.mcp.grants keeps them
encrypted in DynamoDB; tests and the conformance client use an in-memory one). A grant belongs to one
registration of one server (tenant, agent, server name and its `created_at`), so a server removed and
registered again never inherits the old tokens. A grant that cannot be refreshed is marked
`needs_authorization`: calls then fail with that code, which the model reads, and the API shows it as
the server's `status` until a person authorizes again.

`state` is 256 random bits, stored only as its SHA-256, bound to the tenant, agent and server that started
it, single use and valid for `STATE_TTL`. A code delivered with another flow's state fails at the token
endpoint: PKCE binds each code to the verifier of the flow that asked for it.

The callback is also bound to the browser that started the flow. The URL handed out is not the
authorization server's but Stepwise's start link (`start_link`: the callback's `.../oauth/start?flow=`),
which opens once (`open_flow`): it keeps the SHA-256 of a fresh random nonce with the authorization in
flight, gives the nonce to the browser as a short-lived cookie (`FlowCookie`) scoped to the callback's
path, and sends it on to the authorization server. The callback (`take`) spends the state only together
with that cookie: a code and state delivered to another browser (a forged or replayed callback, a link
passed on after it was opened) are refused and leave the authorization in flight untouched. The MCP
servers' and the mail triggers' flows all keep their state here, so all three are bound the same way.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol, TypeVar
from urllib.parse import urlencode, urlparse

import anyio
import httpx2
from pydantic import BaseModel

from stepwise.core.schema import utcnow
from stepwise.mcp import oauth
from stepwise.mcp.models import MCP_TIMEOUT, McpServer
from stepwise.mcp.oauth import Grant, OAuthFailure, Pending
from stepwise.mcp.transport import guarded_async_client
from stepwise.net.ssrf import AllowHosts, BlockedDestination

STATE_TTL = timedelta(minutes=10)
CALLBACK_PATH = "/v1/integrations/mcp/oauth/callback"
# Each integration's start link sits beside its callback: /v1/integrations/<kind>/oauth/{start,callback}.
CALLBACK_SUFFIX, START_SUFFIX = "/callback", "/start"
COOKIE_PREFIX = "stepwise_oauth_"
T = TypeVar("T")


@dataclass(frozen=True)
class GrantKey:
    """One registration of one server: a server registered again under the same name is another key."""

    agent_id: str
    server: str
    created_at: datetime

    @classmethod
    def of(cls, agent_id: str, server: McpServer) -> GrantKey:
        return cls(agent_id, server.name, server.created_at)

    @property
    def id(self) -> str:
        return f"{self.agent_id}/{self.server}/{self.created_at.isoformat()}"


class StoredGrant(BaseModel):
    grant: Grant
    needs_authorization: bool = True
    reason: str | None = None  # why it needs authorization again


class PendingAuthorization(BaseModel):
    """An authorization in flight, found again by its state when the callback arrives."""

    tenant_id: str
    agent_id: str
    server: str
    server_created_at: datetime
    pending: Pending
    expires_at: datetime
    # The authorization server's URL the start link redirects to (it holds the state, so it is kept
    # encrypted with the rest). None only in records written before start links existed.
    authorization_url: str | None = None

    @property
    def key(self) -> GrantKey:
        return GrantKey(self.agent_id, self.server, self.server_created_at)


StateProblem = Literal["unknown", "used", "expired", "removed", "opened", "unbound"]


class StateRejected(Exception):
    """The callback's state is not one we issued (`unknown`), was already used, has expired, or was
    issued for a server (or an agent) removed since (`removed`); its start link was opened already
    (`opened`); or the callback came without the cookie its start link set (`unbound`)."""

    def __init__(self, problem: StateProblem) -> None:
        super().__init__(problem)
        self.problem = problem


class GrantStore(Protocol):
    """Where grants and authorizations in flight are kept (encrypted at rest in the real one)."""

    def load(self, tenant_id: str, key: GrantKey) -> StoredGrant | None: ...

    def save(self, tenant_id: str, key: GrantKey, stored: StoredGrant) -> None: ...

    def delete(self, tenant_id: str, key: GrantKey) -> None: ...

    def put_pending(self, state_hash: str, record: PendingAuthorization) -> None: ...

    def open_pending(self, state_hash: str, nonce_hash: str) -> PendingAuthorization:
        """The record, bound to `nonce_hash` in the same write, once: raises StateRejected("unknown" |
        "used" | "opened") otherwise, leaving the binding as it was (expiry is the caller's check)."""
        ...

    def take_pending(self, state_hash: str, nonce_hash: str | None) -> PendingAuthorization:
        """The record, marked used in the same write so that only one caller ever gets it, and only when
        `nonce_hash` is the one it was opened with; raises StateRejected("unknown" | "used" | "unbound")
        otherwise, leaving it unused (expiry is the caller's check)."""
        ...


def state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


def nonce_hash(nonce: str) -> str:
    return hashlib.sha256(nonce.encode()).hexdigest()


def same_nonce(stored: str | None, given: str | None) -> bool:
    """Whether a callback's nonce hash is the one its flow was opened with (for stores that compare in
    process; the DynamoDB one compares in its conditional write)."""
    return stored is not None and given is not None and hmac.compare_digest(stored, given)


def callback_url(public_url: str) -> str:
    return f"{public_url.rstrip('/')}{CALLBACK_PATH}"


def start_link(redirect_uri: str, state: str) -> str:
    """The link handed out as `authorization_url`: the start route beside the callback `redirect_uri`."""
    if not redirect_uri.endswith(CALLBACK_SUFFIX):
        raise ValueError(f"{redirect_uri} is not an OAuth callback")
    return f"{redirect_uri.removesuffix(CALLBACK_SUFFIX)}{START_SUFFIX}?{urlencode({'flow': state})}"


def cookie_name(state: str) -> str:
    """One cookie per flow (named by its state's hash), so flows started side by side in one browser
    (two tabs, two servers) do not overwrite each other's."""
    return f"{COOKIE_PREFIX}{state_hash(state)[:16]}"


@dataclass(frozen=True)
class FlowCookie:
    """The cookie that binds a callback to the browser that opened the start link: HttpOnly,
    SameSite=Lax (sent on the authorization server's top-level redirect back, not on a cross-site
    subrequest), Secure when the callback is https, scoped to the integration's `.../oauth` path and
    living no longer than the state. `max_age` 0 with an empty value clears it."""

    name: str
    value: str
    path: str
    secure: bool
    max_age: int

    @classmethod
    def for_callback(cls, redirect_uri: str, state: str, value: str, max_age: int) -> FlowCookie:
        callback = urlparse(redirect_uri)
        path = callback.path.removesuffix(CALLBACK_SUFFIX) or "/"
        return cls(cookie_name(state), value, path, callback.scheme == "https", max_age)


@dataclass(frozen=True)
class Opened:
    """A start link opened: where to send the browser, and the cookie to give it on the way."""

    authorization_url: str
    cookie: FlowCookie


# --- the flow --------------------------------------------------------------------------------------


def authorize(
    store: GrantStore,
    tenant_id: str,
    agent_id: str,
    server: McpServer,
    redirect_uri: str,
    *,
    client_secret: str | None = None,
    allow_hosts: AllowHosts = None,
    timeout: float = MCP_TIMEOUT,
) -> str:
    """Start (or restart) the server's authorization; the URL a person opens to approve it.

    A restart keeps the registered client and asks for at least the scopes asked for before. Raises
    OAuthFailure when the server or its authorization server cannot be discovered or registered with.
    """
    if server.auth is None or server.url is None:  # a stdio server has no HTTP endpoint to authorize
        raise OAuthFailure(oauth.NOT_REQUIRED, f"MCP server {server.name} is not configured with auth")
    url = server.url
    key = GrantKey.of(agent_id, server)
    prior = store.load(tenant_id, key)
    # The stored secret goes with the pre-registered client, which oauth.start keeps to the issuer it was
    # first authorized with (it refuses another before anything is sent to it).
    secret = client_secret or (prior.grant.client.client_secret if prior and server.auth.client_id else None)
    started = _run(
        lambda http: oauth.start(
            http,
            url,
            redirect_uri,
            scopes=server.auth.scopes if server.auth else None,
            client_id=server.auth.client_id if server.auth else None,
            client_secret=secret,
            prior=prior.grant if prior else None,
            # The tenant's own name, not a "Stepwise" every tenant shares: the person consenting sees
            # whose app asks, and one tenant's client cannot pass for another's.
            client_name=tenant_id,
        ),
        allow_hosts=allow_hosts,
        timeout=timeout,
    )
    grant = started.grant
    if (
        prior is not None
        and prior.grant.tokens is not None
        and oauth.same_issuer(prior.grant, grant.metadata)
    ):
        # Tokens that still work keep working until the new authorization replaces them; never under
        # another issuer, whose token endpoint would be sent the old refresh token (review finding 1).
        grant = grant.model_copy(update={"tokens": prior.grant.tokens, "expires_at": prior.grant.expires_at})
    reason = prior.reason if prior else None
    store.save(tenant_id, key, StoredGrant(grant=grant, needs_authorization=True, reason=reason))
    store.put_pending(
        state_hash(started.state),
        PendingAuthorization(
            tenant_id=tenant_id,
            agent_id=agent_id,
            server=server.name,
            server_created_at=server.created_at,
            pending=started.pending,
            expires_at=utcnow() + STATE_TTL,
            authorization_url=started.authorization_url,
        ),
    )
    return start_link(redirect_uri, started.state)


def exchange(
    store: GrantStore,
    record: PendingAuthorization,
    code: str,
    *,
    iss: str | None = None,
    allow_hosts: AllowHosts = None,
    timeout: float = MCP_TIMEOUT,
) -> None:
    """Finish the authorization `record` (from `take`) started: exchange `code` for tokens and store them.
    StateRejected("removed") when the server's grant is gone (the server was removed meanwhile);
    OAuthFailure when the token endpoint refuses (the state is spent either way: a person starts again)."""
    stored = store.load(record.tenant_id, record.key)
    if stored is None:
        raise StateRejected("removed")
    grant = _run(
        lambda http: oauth.exchange(http, stored.grant, record.pending, code, iss),
        allow_hosts=allow_hosts,
        timeout=timeout,
    )
    store.save(record.tenant_id, record.key, StoredGrant(grant=grant, needs_authorization=False))


def open_flow(store: GrantStore, flow: str) -> Opened:
    """Open the start link of the authorization `flow` (its state) names, once: a fresh nonce is bound to
    it, for the browser's cookie. StateRejected when it cannot be opened (again)."""
    nonce = secrets.token_urlsafe(32)
    record = store.open_pending(state_hash(flow), nonce_hash(nonce))
    left = (record.expires_at - utcnow()).total_seconds()
    if left <= 0 or record.authorization_url is None:
        raise StateRejected("expired")
    cookie = FlowCookie.for_callback(record.pending.redirect_uri, flow, nonce, math.ceil(left))
    return Opened(record.authorization_url, cookie)


def take(store: GrantStore, state: str, nonce: str | None) -> PendingAuthorization:
    """The authorization `state` names, spent now, when `nonce` (the callback's cookie) is the one its
    start link gave the browser; StateRejected when it cannot be used."""
    record = store.take_pending(state_hash(state), nonce_hash(nonce) if nonce else None)
    if record.expires_at <= utcnow():
        raise StateRejected("expired")
    return record


def cleared_cookie(redirect_uri: str, state: str) -> FlowCookie:
    """The Set-Cookie that removes the flow's cookie, once its callback has come back."""
    return FlowCookie.for_callback(redirect_uri, state, "", 0)


def needs_authorization(store: GrantStore, tenant_id: str, agent_id: str, server: McpServer) -> bool:
    if server.auth is None:
        return False
    stored = store.load(tenant_id, GrantKey.of(agent_id, server))
    return stored is None or stored.needs_authorization


def forget(store: GrantStore, tenant_id: str, agent_id: str, server: McpServer) -> None:
    """Drop the server's grant (its tokens and client) when the server is removed."""
    if server.auth is not None:
        store.delete(tenant_id, GrantKey.of(agent_id, server))


# --- tokens for calls ------------------------------------------------------------------------------


@dataclass
class TokenSource:
    """The access token for one server's calls, as the MCP client asks for it (stepwise.mcp.client).

    `token()` refreshes a token that expires within oauth.REFRESH_MARGIN first; `token(force=True)` after
    the server answered 401 to the current one. When there is no usable token it marks the grant
    `needs_authorization` and raises OAuthFailure(NEEDS_AUTHORIZATION).
    """

    store: GrantStore
    tenant_id: str
    key: GrantKey

    async def token(self, http: httpx2.AsyncClient, *, force: bool = False) -> str:
        stored = self.store.load(self.tenant_id, self.key)
        if stored is None:
            raise OAuthFailure(oauth.NEEDS_AUTHORIZATION, "it has not been authorized yet")
        grant = stored.grant
        if stored.needs_authorization and not grant.fresh():
            raise OAuthFailure(oauth.NEEDS_AUTHORIZATION, stored.reason or "it has not been authorized yet")
        if grant.tokens is not None and grant.fresh() and not force:
            return grant.tokens.access_token
        try:
            grant = await oauth.refresh(http, grant)
        except OAuthFailure as exc:
            self.revoked(exc.message, stored)
            raise OAuthFailure(oauth.NEEDS_AUTHORIZATION, exc.message) from exc
        self.store.save(self.tenant_id, self.key, StoredGrant(grant=grant, needs_authorization=False))
        assert grant.tokens is not None
        return grant.tokens.access_token

    def revoked(self, reason: str, stored: StoredGrant | None = None, *, scope: str | None = None) -> None:
        """Mark the grant as needing a person again (with `scope`, the more the server asked for)."""
        stored = stored or self.store.load(self.tenant_id, self.key)
        if stored is None:
            return
        grant = stored.grant
        if scope:
            grant = grant.model_copy(update={"scope": oauth.union_scopes(grant.scope, scope)})
        self.store.save(
            self.tenant_id, self.key, StoredGrant(grant=grant, needs_authorization=True, reason=reason)
        )


def token_source(store: GrantStore, tenant_id: str, agent_id: str, server: McpServer) -> TokenSource | None:
    """The server's token source, or None for a server without auth."""
    if server.auth is None:
        return None
    return TokenSource(store, tenant_id, GrantKey.of(agent_id, server))


# --- running the async flow from sync code ------------------------------------------------------------


def _run(step: Callable[[httpx2.AsyncClient], Awaitable[T]], *, allow_hosts: AllowHosts, timeout: float) -> T:
    async def main() -> T:
        with anyio.fail_after(timeout):
            async with oauth_client(timeout, allow_hosts) as http:
                return await step(http)

    try:
        return anyio.run(main)
    except OAuthFailure:
        raise
    except BlockedDestination as exc:
        raise OAuthFailure(exc.code, exc.message) from exc
    except TimeoutError as exc:
        raise OAuthFailure(
            oauth.DISCOVERY_FAILED, f"the authorization did not finish within {timeout:g} s"
        ) from exc
    except httpx2.HTTPError as exc:
        raise OAuthFailure(oauth.DISCOVERY_FAILED, f"could not reach the server: {exc}") from exc


def oauth_client(timeout: float, allow_hosts: AllowHosts = None) -> httpx2.AsyncClient:
    """The SSRF-guarded client every OAuth request goes through."""
    from stepwise.tools.http_tool import USER_AGENT

    return guarded_async_client(headers={"User-Agent": USER_AGENT}, timeout=timeout, allow_hosts=allow_hosts)
