"""Outlook triggers: a person authorizes a Microsoft 365 mailbox, Microsoft Graph notifies us of each new
Inbox message through a change-notification subscription, and each message starts one run.

- **Authorization** is the MCP OAuth store and flow, as gmail's (stepwise.triggers.gmail
  .start_authorization) with Microsoft's endpoints and the `offline_access Mail.Read User.Read` scopes.
- **The subscription** (`subscribe`) is on `me/mailFolders('Inbox')/messages`, `created`, with a
  random `clientState` kept as the trigger's secret (KMS ciphertext under `trigger/<id>`, which only the
  intake may decrypt). Graph first POSTs a `validationToken` to the notification URL, which answers it
  as plain text (`validation`). The subscription id is claimed like an address, so a notification finds
  its trigger with one read.
- **A notification** (`accept`) is checked item by item: a `clientState` that is not the trigger's
  starts nothing and is counted as a bad signature. Each item is one delivery, deduplicated by
  (subscription id, message id): Graph re-delivers.
- **The worker** fetches the message's MIME (`/me/messages/{id}/$value`) and starts the run.
- **Renewal**: subscriptions on messages last at most 4230 minutes (just under 3 days); `renew` PATCHes
  the expiry, from the same daily sweep as gmail's watches (those within 48 h of their end).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from stepwise.core import config, credentials, safejson
from stepwise.core.errors import Conflict, Unprocessable
from stepwise.core.schema import rfc3339, utcnow
from stepwise.settings import crypto
from stepwise.triggers import gmail, intake, store
from stepwise.triggers.mail import Email, parse
from stepwise.triggers.models import MailAccepted, Trigger

if TYPE_CHECKING:
    from stepwise.mcp.authorization import PendingAuthorization

SCOPE = "offline_access Mail.Read User.Read"
RESOURCE = "me/mailFolders('Inbox')/messages"
LIFETIME = timedelta(minutes=4200)  # Graph allows 4230 minutes on messages; a little less is asked
NOTIFY_PATH = "/v1/integrations/outlook/notify"
CALLBACK_PATH = "/v1/integrations/outlook/oauth/callback"


def subscription_key(subscription_id: str) -> str:
    return f"outlook-sub:{subscription_id}"


def address_key(mailbox: str) -> str:
    return f"outlook:{mailbox.lower()}"


def _client_secret() -> str | None:
    return credentials.get(credentials.MS_CLIENT_SECRET)


def check_configured() -> config.Outlook:
    settings = config.outlook()
    if not settings.client_id or not _client_secret():
        raise Unprocessable(
            "outlook triggers need the operator's Microsoft app (MsClientId, the MS_CLIENT_SECRET secret); "
            "this deployment has not set them",
            code="outlook_not_configured",
        )
    return settings


def authorize(tenant_id: str, trigger: Trigger, redirect_uri: str) -> str:
    settings = check_configured()
    return gmail.start_authorization(
        tenant_id,
        trigger,
        redirect_uri,
        issuer="https://login.microsoftonline.com/common/v2.0",
        auth_url=settings.auth_url,
        token_url=settings.token_url,
        resource=settings.graph_url,
        scope=SCOPE,
        client_id=str(settings.client_id),
        client_secret=_client_secret(),
        extra={"response_mode": "query"},
    )


def _graph(tenant_id: str, trigger: Trigger, method: str, path: str, body: Any = None) -> Any:
    url = config.outlook().graph_url.rstrip("/") + path
    return gmail.authorized(tenant_id, trigger, method, url, body=body)


def connect(record: PendingAuthorization, code: str, public_url: str) -> Trigger:
    """Complete the authorization the callback spent: tokens, the mailbox, the subscription."""
    from stepwise.mcp.authorization import exchange

    item = store.find(record.agent_id)
    if item is None or item.tenant_id != record.tenant_id:
        raise store.not_found(record.agent_id)
    exchange(gmail._store(), record, code)
    trigger = store.to_model(item)
    me = _graph(record.tenant_id, trigger, "GET", "/me").json()
    mailbox = str(me.get("mail") or me.get("userPrincipalName") or "").lower()
    if trigger.address != mailbox and not store.claim_address(
        record.tenant_id, trigger.trigger_id, address_key(mailbox)
    ):
        raise Conflict(f"{mailbox} is connected to another trigger", code="address_taken")
    return subscribe(record.tenant_id, trigger.model_copy(update={"address": mailbox}), public_url)


def subscribe(tenant_id: str, trigger: Trigger, public_url: str) -> Trigger:
    client_state = secrets.token_urlsafe(32)  # Graph sends it back with every notification
    expires = utcnow() + LIFETIME
    created = _graph(
        tenant_id,
        trigger,
        "POST",
        "/subscriptions",
        body={
            "changeType": "created",
            "notificationUrl": public_url.rstrip("/") + NOTIFY_PATH,
            "resource": RESOURCE,
            "expirationDateTime": rfc3339(expires),
            "clientState": client_state,
        },
    ).json()
    subscription_id = str(created["id"])
    parts, _ = crypto.encrypt(tenant_id, intake.secret_context(trigger.trigger_id), client_state)
    store.set_secret(tenant_id, trigger.trigger_id, parts)
    store.claim_address(tenant_id, trigger.trigger_id, subscription_key(subscription_id))
    updated = trigger.model_copy(
        update={
            "connected": True,
            "subscription_id": subscription_id,
            "watch_expires_at": expires,
            "updated_at": utcnow(),
        }
    )
    store.save(tenant_id, updated)
    return updated


def renew(tenant_id: str, trigger: Trigger) -> Trigger:
    """Push the subscription's end LIFETIME from now."""
    expires = utcnow() + LIFETIME
    _graph(
        tenant_id,
        trigger,
        "PATCH",
        f"/subscriptions/{trigger.subscription_id}",
        body={"expirationDateTime": rfc3339(expires)},
    )
    updated = trigger.model_copy(update={"watch_expires_at": expires, "updated_at": utcnow()})
    store.save(tenant_id, updated)
    return updated


# --- notifications (the public route) ----------------------------------------------------------------


def accept(raw: bytes, *, now: datetime | None = None) -> MailAccepted:
    """Graph's notifications: each item with its trigger's clientState becomes a delivery, queued."""
    try:
        items = safejson.loads(raw)["value"]
        # Graph sends objects only: anything else is no notification of Graph's.
        assert isinstance(items, list) and all(isinstance(item, dict) for item in items)
    except (ValueError, KeyError, TypeError, AssertionError):
        raise Unprocessable(
            "the body is not a Graph change notification", code="invalid_notification"
        ) from None
    answer = MailAccepted(type="graph_notification")
    when = now or utcnow()
    for notification in items:
        owner = store.address_owner(subscription_key(str(notification.get("subscriptionId", ""))))
        item = store.find(owner[1]) if owner else None
        if item is None:
            answer.ignored += 1
            continue
        expected = intake.secrets_of(item, when)
        given = str(notification.get("clientState") or "")
        if not any(hmac.compare_digest(given.encode(), secret.encode()) for secret in expected):
            store.count_refusal(item.pk, "bad_signature")
            answer.ignored += 1
            continue
        message_id = str((notification.get("resourceData") or {}).get("id") or "")
        if not message_id:
            answer.ignored += 1
            continue
        # Graph re-delivers: one delivery per (subscription, message).
        key = f"graph:{notification['subscriptionId']}/{message_id}"
        delivery_id, duplicate = intake.record_event(
            item.tenant_id, item.pk, key, {"kind": "message", "id": message_id}, when
        )
        (answer.deduplicated if duplicate else answer.deliveries).append(delivery_id)
    return answer


def load(tenant_id: str, trigger: Trigger, stored: Mapping[str, Any]) -> Email:
    """A message delivery's message, as MIME (FileNotFoundError: deleted since)."""
    response = _graph(tenant_id, trigger, "GET", f"/me/messages/{stored['id']}/$value")
    return parse(response.content)
