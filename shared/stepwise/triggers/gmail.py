"""Gmail triggers: a person authorizes a mailbox, Gmail pushes its changes through Pub/Sub, and each
new message starts one run.

- **Authorization** is the MCP OAuth code (stepwise.mcp): the grant store (McpAuthTable, encrypted
  under the `mcp-oauth/` context), the single-use `state`, PKCE, the code exchange and the refresh rules.
  The grant's key is the trigger (its id in the key's agent place, `gmail` as its server); only the
  start differs, because Google's endpoints are known rather than discovered from an MCP server.
- **The callback** (`connect`) exchanges the code, reads the mailbox's address (users.getProfile),
  claims it (one trigger per mailbox) and calls users.watch on GMAIL_PUBSUB_TOPIC: the watch's history
  id is where reading starts.
- **A push** (`accept_push`, public) carries a Google-signed OIDC token: its signature against Google's
  keys (fetched through the SSRF guard, cached), issuer and audience are checked; its data names the
  mailbox. It is recorded as one delivery (deduplicated by Pub/Sub's message id) and queued.
- **The worker** reads users.history.list from the trigger's cursor (`fan_out`) and records each new
  INBOX message as a delivery of its own (deduplicated by Gmail's message id, so overlapping pushes
  and re-deliveries add nothing), then moves the cursor. Each message delivery is fetched raw
  (`load`) and starts one run like any email.
- **Renewal**: a watch lasts 7 days; `renew` calls users.watch again (stepwise.triggers.renewal, daily,
  for those within 48 h of expiry).
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import httpx

from stepwise.core import config, credentials, safejson
from stepwise.core.errors import Conflict, Forbidden, Unauthorized, Unavailable, Unprocessable
from stepwise.core.schema import utcnow
from stepwise.net.outbound import OutboundRefused
from stepwise.net.ssrf import guarded_client
from stepwise.triggers import intake, store
from stepwise.triggers.mail import Email, parse
from stepwise.triggers.models import MailAccepted, Trigger

if TYPE_CHECKING:
    from stepwise.mcp.authorization import GrantKey, PendingAuthorization

SERVER = "gmail"  # the grant key's server name of a trigger's mailbox
SCOPE = "https://www.googleapis.com/auth/gmail.readonly"
ISSUERS = ("https://accounts.google.com", "accounts.google.com")
KEYS_TTL = 3600.0  # seconds Google's signing keys are kept before they are fetched again
TIMEOUT = 10.0
_KEYS: dict[str, Any] = {}
_KEYS_LOCK = threading.Lock()


def address_key(mailbox: str) -> str:
    """The address item of a connected mailbox (not an address SES receives: its own namespace)."""
    return f"gmail:{mailbox.lower()}"


def _created(trigger: Trigger) -> datetime:
    """The trigger's creation time as stored (milliseconds): the grant's key must be the same before
    and after the trigger's document has been written and read back."""
    at = trigger.created_at
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def grant_key(trigger: Trigger) -> GrantKey:
    from stepwise.mcp.authorization import GrantKey

    return GrantKey(trigger.trigger_id, trigger.type, _created(trigger))


def _store() -> Any:
    from stepwise.mcp.grants import DynamoGrantStore

    return DynamoGrantStore()


def _client_secret() -> str | None:
    return credentials.get(credentials.GOOGLE_CLIENT_SECRET)


def check_configured() -> config.Gmail:
    settings = config.gmail()
    if not settings.client_id or not settings.pubsub_topic or not _client_secret():
        raise Unprocessable(
            "gmail triggers need the operator's Google OAuth client (GoogleClientId, the "
            "GOOGLE_CLIENT_SECRET secret) and GmailPubSubTopic; this deployment has not set them",
            code="gmail_not_configured",
        )
    return settings


# --- authorization ------------------------------------------------------------------------------------


def authorize(tenant_id: str, trigger: Trigger, redirect_uri: str) -> str:
    """The URL a person opens to let the trigger read the mailbox (Google's code flow with PKCE)."""
    settings = check_configured()
    return start_authorization(
        tenant_id,
        trigger,
        redirect_uri,
        issuer=ISSUERS[0],
        auth_url=settings.auth_url,
        token_url=settings.token_url,
        resource=settings.api_url,
        scope=SCOPE,
        client_id=str(settings.client_id),
        client_secret=_client_secret(),
        # A refresh token: the mailbox is read long after the person left.
        extra={"access_type": "offline", "prompt": "consent"},
    )


def start_authorization(
    tenant_id: str,
    trigger: Trigger,
    redirect_uri: str,
    *,
    issuer: str,
    auth_url: str,
    token_url: str,
    resource: str,
    scope: str,
    client_id: str,
    client_secret: str | None,
    extra: Mapping[str, str],
) -> str:
    """A mailbox provider's authorization code flow with PKCE, kept in the MCP OAuth store: the grant
    (keyed by the trigger) and the pending state, which the provider's callback spends. Returns the start
    link (stepwise.mcp.authorization.start_link) that sends a person on to the provider."""
    from mcp.client.auth import PKCEParameters
    from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata

    from stepwise.mcp.authorization import (
        STATE_TTL,
        PendingAuthorization,
        StoredGrant,
        start_link,
        state_hash,
    )
    from stepwise.mcp.oauth import Grant, Pending

    metadata = OAuthMetadata(
        issuer=issuer, authorization_endpoint=auth_url, token_endpoint=token_url
    )  # pydantic parses the URLs
    client = OAuthClientInformationFull(
        client_id=client_id,
        client_secret=client_secret,
        token_endpoint_auth_method="client_secret_post",
        redirect_uris=[redirect_uri],
    )
    grant = Grant(client=client, metadata=metadata, resource=resource, scope=scope)
    pkce, state = PKCEParameters.generate(), secrets.token_urlsafe(32)
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "scope": scope,
        "state": state,
        "code_challenge": pkce.code_challenge,
        "code_challenge_method": "S256",
        **extra,
    }
    store_ = _store()
    store_.save(tenant_id, grant_key(trigger), StoredGrant(grant=grant, needs_authorization=True))
    store_.put_pending(
        state_hash(state),
        PendingAuthorization(
            tenant_id=tenant_id,
            agent_id=trigger.trigger_id,
            server=trigger.type,
            server_created_at=_created(trigger),
            pending=Pending(code_verifier=pkce.code_verifier, redirect_uri=redirect_uri),
            expires_at=utcnow() + STATE_TTL,
            authorization_url=f"{auth_url}?{urlencode(params)}",
        ),
    )
    # The person opens Stepwise's start link, which binds the callback to their browser (as MCP's).
    return start_link(redirect_uri, state)


def is_state_of(record: PendingAuthorization, kind: str) -> bool:
    """Whether the spent state was issued for a trigger of `kind` (not an MCP server's, not another's)."""
    return record.server == kind and record.agent_id.startswith("trg_")


def connect(record: PendingAuthorization, code: str) -> Trigger:
    """Complete the authorization `record` (spent by the callback): tokens, the mailbox, its watch."""
    from stepwise.mcp.authorization import exchange

    item = store.find(record.agent_id)
    if item is None or item.tenant_id != record.tenant_id:
        raise store.not_found(record.agent_id)
    exchange(_store(), record, code)
    trigger = store.to_model(item)
    mailbox = str(
        _api(record.tenant_id, trigger, "GET", "/gmail/v1/users/me/profile")["emailAddress"]
    ).lower()
    if trigger.address and trigger.address != mailbox:
        store.release_address(trigger.trigger_id, address_key(trigger.address))
    if trigger.address != mailbox and not store.claim_address(
        record.tenant_id, trigger.trigger_id, address_key(mailbox)
    ):
        raise Conflict(f"{mailbox} is connected to another trigger", code="address_taken")
    trigger = trigger.model_copy(update={"address": mailbox})
    return renew(record.tenant_id, trigger)


def renew(tenant_id: str, trigger: Trigger) -> Trigger:
    """users.watch on the operator's topic (again): the watch lasts 7 days; its history id starts the
    cursor when the trigger has none yet."""
    settings = check_configured()
    watched = _api(
        tenant_id,
        trigger,
        "POST",
        "/gmail/v1/users/me/watch",
        body={"topicName": settings.pubsub_topic, "labelIds": ["INBOX"], "labelFilterBehavior": "INCLUDE"},
    )
    expires = datetime.fromtimestamp(int(watched["expiration"]) / 1000, UTC)
    updated = trigger.model_copy(
        update={"connected": True, "watch_expires_at": expires, "updated_at": utcnow()}
    )
    store.save(tenant_id, updated)
    store.start_cursor(trigger.trigger_id, str(watched["historyId"]))
    return updated


# --- calls ------------------------------------------------------------------------------------------


def access_token(tenant_id: str, trigger: Trigger, *, force: bool = False) -> str:
    """A fresh access token, refreshed by the MCP OAuth rules (before expiry; once more after a 401)."""
    import anyio

    from stepwise.mcp.authorization import TokenSource, oauth_client

    source = TokenSource(_store(), tenant_id, grant_key(trigger))

    async def main() -> str:
        async with oauth_client(TIMEOUT) as http:
            return await source.token(http, force=force)

    return anyio.run(main)


def _api(
    tenant_id: str,
    trigger: Trigger,
    method: str,
    path: str,
    *,
    params: Mapping[str, Any] | None = None,
    body: Any = None,
) -> dict[str, Any]:
    response = authorized(tenant_id, trigger, method, config.gmail().api_url.rstrip("/") + path, params, body)
    found: dict[str, Any] = response.json()
    return found


def authorized(
    tenant_id: str,
    trigger: Trigger,
    method: str,
    url: str,
    params: Mapping[str, Any] | None = None,
    body: Any = None,
) -> httpx.Response:
    """A mailbox API call with the trigger's access token (refreshed and tried once more after a 401),
    through the SSRF guard. FileNotFoundError on 404 (the message deleted since)."""
    for attempt in (0, 1):
        token = access_token(tenant_id, trigger, force=attempt == 1)
        with guarded_client(timeout=TIMEOUT) as client:
            response = client.request(
                method, url, params=params, json=body, headers={"Authorization": f"Bearer {token}"}
            )
            response.read()
        if response.status_code != 401:
            break
    if response.status_code == 404:
        raise FileNotFoundError(url)
    response.raise_for_status()
    return response


# --- push -------------------------------------------------------------------------------------------


def _keys(url: str) -> Any:
    """Google's signing keys (a JWK set), fetched through the SSRF guard and kept for KEYS_TTL."""
    import jwt

    with _KEYS_LOCK:
        cached = _KEYS.get(url)
    if cached is not None and cached[0] > time.monotonic():
        return cached[1]
    with guarded_client(timeout=TIMEOUT, max_response_bytes=256 * 1024) as client:
        response = client.get(url)
    response.raise_for_status()
    found = jwt.PyJWKSet.from_dict(response.json())
    with _KEYS_LOCK:
        _KEYS[url] = (time.monotonic() + KEYS_TTL, found)
    return found


def verify_token(authorization: str | None) -> dict[str, Any]:
    """The push's OIDC token's claims, once its signature (Google's keys), issuer, audience and expiry
    check out; Unauthorized otherwise."""
    import jwt

    settings = config.gmail()
    if not settings.push_audience:
        raise Forbidden(
            "gmail pushes are not configured here (GmailPushAudience)", code="gmail_not_configured"
        )
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("the push carries no bearer token", code="bad_token")
    try:
        kid = jwt.get_unverified_header(token).get("kid")
        try:
            keys = _keys(settings.certs_url)
        except (OutboundRefused, httpx.HTTPError, ValueError) as exc:
            raise Unavailable(
                f"Google's signing keys could not be fetched: {exc}", code="keys_unavailable"
            ) from None
        key = next((k for k in keys.keys if k.key_id == kid), None)
        if key is None:
            raise Unauthorized("the token is signed by no key of Google's", code="bad_token")
        claims: dict[str, Any] = jwt.decode(
            token,
            key.key,
            algorithms=["RS256"],
            audience=settings.push_audience,
            issuer=list(ISSUERS),
            options={"require": ["exp", "iat", "iss", "aud"]},
        )
    except jwt.PyJWTError as exc:
        raise Unauthorized(f"the push's token does not verify: {exc}", code="bad_token") from None
    if claims.get("email_verified") is False:
        raise Unauthorized("the token's service account email is not verified", code="bad_token")
    return claims


def accept_push(authorization: str | None, raw: bytes, *, now: datetime | None = None) -> MailAccepted:
    """One Pub/Sub push, verified, recorded as a delivery of the mailbox's trigger and queued."""
    verify_token(authorization)
    try:
        envelope = safejson.loads(raw)
        message = envelope["message"]
        data = json.loads(base64.b64decode(message["data"]))
        mailbox, history_id, pubsub_id = (
            str(data["emailAddress"]).lower(),
            str(data["historyId"]),
            message["messageId"],
        )
    except (ValueError, KeyError, TypeError):
        raise Unprocessable("the body is not a Gmail push notification", code="invalid_push") from None
    owner = store.address_owner(address_key(mailbox))
    if owner is None:
        return MailAccepted(type="gmail_push", ignored=1)
    tenant_id, trigger_id = owner
    when = now or utcnow()
    key = f"push:{pubsub_id}"
    delivery_id, duplicate = intake.record_event(
        tenant_id, trigger_id, key, {"kind": "push", "history_id": history_id}, when
    )
    return MailAccepted(
        type="gmail_push",
        deliveries=[] if duplicate else [delivery_id],
        deduplicated=[delivery_id] if duplicate else [],
    )


# --- the worker's side ------------------------------------------------------------------------------


def fan_out(tenant_id: str, trigger: Trigger, cursor: str | None) -> list[str]:
    """The mailbox's messages added to INBOX since the cursor, each recorded and queued as a delivery of
    its own (once per Gmail message id, however many pushes name it); then the cursor moves. The new
    deliveries' ids."""
    if cursor is None:
        raise Unprocessable("the mailbox has not been connected: authorize it first", code="not_connected")
    found: list[str] = []
    params: dict[str, Any] = {"startHistoryId": cursor, "historyTypes": "messageAdded", "labelId": "INBOX"}
    latest = cursor
    while True:
        try:
            page = _api(tenant_id, trigger, "GET", "/gmail/v1/users/me/history", params=params)
        except FileNotFoundError:
            # Gmail keeps history for about a week: older, a full resync would be needed (not built).
            raise Unprocessable(
                f"the mailbox's history from {cursor} has expired; messages before now are not read",
                code="history_expired",
            ) from None
        for entry in page.get("history") or []:
            for added in entry.get("messagesAdded") or []:
                message = added.get("message") or {}
                if "INBOX" not in (message.get("labelIds") or ["INBOX"]):
                    continue
                stored = {
                    "kind": "message",
                    "id": str(message["id"]),
                    "thread_id": str(message.get("threadId", "")),
                }
                delivery_id, duplicate = intake.record_event(
                    tenant_id, trigger.trigger_id, f"mail:{message['id']}", stored, utcnow()
                )
                if not duplicate:
                    found.append(delivery_id)
        latest = str(page.get("historyId") or latest)
        if not page.get("nextPageToken"):
            break
        params["pageToken"] = page["nextPageToken"]
    store.advance_cursor(trigger.trigger_id, latest)
    return found


def load(tenant_id: str, trigger: Trigger, stored: Mapping[str, Any]) -> Email:
    """A message delivery's message, fetched raw and taken apart (FileNotFoundError: deleted since)."""
    message = _api(
        tenant_id, trigger, "GET", f"/gmail/v1/users/me/messages/{stored['id']}", params={"format": "raw"}
    )
    raw = base64.urlsafe_b64decode(str(message["raw"]) + "=" * (-len(str(message["raw"])) % 4))
    return parse(raw, thread_id=str(message.get("threadId") or stored.get("thread_id") or "") or None)
