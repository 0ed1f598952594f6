"""The daily renewal of mailbox triggers: Gmail's watches last 7 days and Graph's subscriptions on
messages under 3, so each one within RENEW_WITHIN of its end is renewed (TriggerWorkerFunction's
schedule)."""

from __future__ import annotations

from datetime import datetime, timedelta

from stepwise.core.observability import logger
from stepwise.core.schema import utcnow
from stepwise.triggers import gmail, outlook, store

RENEW_WITHIN = timedelta(hours=48)


def renew_due(now: datetime | None = None) -> list[str]:
    """Renew every connected gmail watch and outlook subscription that ends within RENEW_WITHIN; the ids
    renewed. One
    that fails (its grant revoked, Google unreachable) is logged and tried again the next day, while
    its watch lasts; the others are renewed regardless."""
    moment = now or utcnow()
    renewed = []
    for item in store.watched_before(moment + RENEW_WITHIN):
        trigger = store.to_model(item)
        if trigger.type not in ("gmail", "outlook") or not trigger.connected or not trigger.enabled:
            continue
        try:
            if trigger.type == "outlook":
                outlook.renew(item.tenant_id, trigger)
            else:
                gmail.renew(item.tenant_id, trigger)
        except Exception:  # noqa: BLE001 - one mailbox's failure must not stop the others' renewal
            logger.exception("watch not renewed", extra={"trigger_id": trigger.trigger_id})
            continue
        renewed.append(trigger.trigger_id)
    return renewed
