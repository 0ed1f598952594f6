"""The whole of each tool result the model read as a description, for `result_read`.

Kept in the session's partition (so a later run of the session reads an earlier run's table, and no other
session or tenant can), at `result#<tool_call_id>`, expiring with the session's messages. The text is
inline up to INLINE_BYTES; beyond that (DynamoDB caps an item at 400 KB) it is the S3 object the loop
already wrote for a result too large for a message (tools/results.py), and the item only says so.
"""

from __future__ import annotations

from datetime import timedelta

from pynamodb.exceptions import DoesNotExist

from stepwise.core import config
from stepwise.core.schema import utcnow
from stepwise.core.tables import SessionItem, bind, tenant_key
from stepwise.tools import results

PREFIX = "result#"
INLINE_BYTES = 300_000  # leaves room under DynamoDB's 400 KB for the keys and attribute names


def save(tenant_id: str, session_id: str, run_id: str, tool_call_id: str, text: str, *, in_s3: bool) -> bool:
    """Keep `text` for result_read; False when it can be kept nowhere (too large for an item, and not
    in S3 because no bucket is configured), and then the model must not be told it can read it."""
    if not in_s3 and len(text.encode()) > INLINE_BYTES:
        return False
    bind()
    SessionItem(
        tenant_key(tenant_id, session_id),
        PREFIX + tool_call_id,
        run_id=run_id,
        result={"stored": True} if in_s3 else {"text": text},
        expires_at=utcnow() + timedelta(days=config.runtime().message_retention_days),
    ).save()
    return True


def load(tenant_id: str, session_id: str, tool_call_id: str) -> str | None:
    """The whole text of a described result of this session (None when there is none, or it expired)."""
    bind()
    try:
        item = SessionItem.get(tenant_key(tenant_id, session_id), PREFIX + tool_call_id, consistent_read=True)
    except DoesNotExist:
        return None
    if item.expires_at is not None and item.expires_at <= utcnow():
        return None  # DynamoDB deletes expired items late: an expired one is gone for us already
    found = item.result or {}
    if "text" in found:
        return str(found["text"])
    if found.get("stored") and item.run_id:
        return results.read(tenant_id, item.run_id, tool_call_id)
    return None
