"""Creating, changing and deleting triggers, and their signing secrets.

A webhook trigger's secret is made here (or given, for a provider that makes its own, like Stripe),
returned once, and kept only as SettingsKey ciphertext under the tenant and "trigger/<trigger id>".
Rotating keeps the replaced secret verifying for `previous_valid_seconds` (24 h by default) so the
sender can switch without a refused delivery."""

from __future__ import annotations

from datetime import timedelta

from stepwise.core import config
from stepwise.core.errors import Conflict, NotFound, Unprocessable
from stepwise.core.ids import new_id
from stepwise.core.schema import utcnow
from stepwise.runs.ports import stores
from stepwise.settings import crypto
from stepwise.triggers import store, verify
from stepwise.triggers.models import (
    SERVED_TYPES,
    Trigger,
    TriggerCreate,
    TriggerCreated,
    TriggerDelivery,
    TriggerPatch,
    TriggerSecret,
    TriggerSecretRotate,
    TriggerTarget,
)


def secret_context(trigger_id: str) -> str:
    """The name a trigger's secret is encrypted under: no setting has it (setting keys are upper case)."""
    return f"trigger/{trigger_id}"


def check_target(tenant_id: str, target: TriggerTarget) -> None:
    """The target exists and is the tenant's (422 otherwise: the trigger could never start it)."""
    if target.workflow_id is not None:
        raise Unprocessable(
            "workflow targets are not available yet; target an agent ({agent_id}) for now",
            code="workflow_targets_unavailable",
        )
    agent_id = str(target.agent_id)
    try:
        stores().agents.get(tenant_id, agent_id)
    except NotFound:
        raise Unprocessable(f"agent {agent_id} does not exist", code="target_not_found") from None


def inbound_address(trigger_id: str, address: str | None) -> str:
    """An ses trigger's address: the one asked for, at the operator's domain, else `<trigger id>@domain`."""
    domain = config.inbound_mail().ses_domain
    if not domain:
        raise Unprocessable(
            "ses triggers need the operator's inbound domain (SesInboundDomain); none is set",
            code="ses_not_configured",
        )
    domain = domain.lower()
    chosen = address or f"{trigger_id.lower()}@{domain}"
    if chosen.rpartition("@")[2] != domain:
        raise Unprocessable(f"an ses trigger's address is at {domain}", code="address_outside_domain")
    return chosen


def create(tenant_id: str, body: TriggerCreate, *, callback_url: str = "") -> TriggerCreated:
    if body.type not in SERVED_TYPES:
        raise Unprocessable(
            f"{body.type} triggers are not available yet; webhook, ses and gmail triggers are",
            code="trigger_type_unavailable",
        )
    check_target(tenant_id, body.target)
    now = utcnow()
    trigger_id = new_id("trg")
    fields = body.model_dump(exclude={"secret"})
    if body.type == "ses":
        fields["address"] = inbound_address(trigger_id, body.address)
        trigger = Trigger(**fields, trigger_id=trigger_id, created_at=now, updated_at=now)
        if not store.claim_address(tenant_id, trigger_id, str(trigger.address)):
            raise Conflict(f"{trigger.address} is another trigger's address", code="address_taken")
        try:
            store.create(tenant_id, trigger, None)
        except BaseException:
            store.release_address(trigger_id, str(trigger.address))
            raise
        return TriggerCreated(**store.shown(trigger).model_dump())
    if body.type == "gmail":
        from stepwise.triggers import gmail

        gmail.check_configured()
        trigger = Trigger(**fields, trigger_id=trigger_id, created_at=now, updated_at=now, connected=False)
        store.create(tenant_id, trigger, None)
        url = gmail.authorize(tenant_id, trigger, callback_url)
        return TriggerCreated(**store.shown(trigger).model_dump(), authorization_url=url)
    trigger = Trigger(**fields, trigger_id=trigger_id, created_at=now, updated_at=now, secret_created_at=now)
    secret = body.secret or verify.new_secret(body.verification or "standard-webhooks")
    parts, _ = crypto.encrypt(tenant_id, secret_context(trigger_id), secret)
    store.create(tenant_id, trigger, parts)
    return TriggerCreated(**store.shown(trigger).model_dump(), secret=secret)


def get(tenant_id: str, trigger_id: str) -> Trigger:
    return store.get(tenant_id, trigger_id)


def list_for(tenant_id: str) -> list[Trigger]:
    return store.list_for(tenant_id)


def update(tenant_id: str, trigger_id: str, patch: TriggerPatch) -> Trigger:
    trigger = store.get(tenant_id, trigger_id)
    # null clears what may be absent (name, user_id, dedupe_path); for the others it changes nothing.
    changes = {
        k
        for k in patch.model_dump(exclude_unset=True)
        if getattr(patch, k) is not None or k in ("name", "user_id", "dedupe_path")
    }
    if "target" in changes and patch.target is not None:
        check_target(tenant_id, patch.target)
    updated = Trigger.model_validate(
        {**trigger.model_dump(), **{k: getattr(patch, k) for k in changes}, "updated_at": utcnow()}
    )
    store.save(tenant_id, updated)
    return store.get(tenant_id, trigger_id)


def delete(tenant_id: str, trigger_id: str) -> None:
    trigger = store.get(tenant_id, trigger_id)
    store.delete(tenant_id, trigger_id)
    if trigger.address:
        key = f"gmail:{trigger.address}" if trigger.type == "gmail" else trigger.address
        store.release_address(trigger_id, key)


def rotate(tenant_id: str, trigger_id: str, body: TriggerSecretRotate) -> TriggerSecret:
    """A new secret, returned this once; the one it replaces verifies beside it for the overlap."""
    item = store.get_item(tenant_id, trigger_id)
    trigger = store.to_model(item)
    if trigger.type != "webhook":
        raise Unprocessable("only webhook triggers have a signing secret", code="trigger_has_no_secret")
    now = utcnow()
    secret = body.secret or verify.new_secret(trigger.verification or "standard-webhooks")
    parts, _ = crypto.encrypt(tenant_id, secret_context(trigger_id), secret)
    overlap = body.previous_valid_seconds
    previous: list[bytes] | None = list(item.secret or []) if overlap else None  # type: ignore[arg-type]
    until = now + timedelta(seconds=overlap) if overlap else None
    trigger = trigger.model_copy(
        update={"secret_created_at": now, "previous_secret_valid_until": until, "updated_at": now}
    )
    store.rotate(tenant_id, trigger, parts, previous)
    return TriggerSecret(secret=secret, created_at=now, previous_valid_until=until)


def deliveries(
    tenant_id: str, trigger_id: str, limit: int, next_token: str | None
) -> tuple[list[TriggerDelivery], str | None]:
    store.get_item(tenant_id, trigger_id)  # another tenant's trigger is a 404 like a missing one
    return store.deliveries(trigger_id, limit=limit, before=next_token)
