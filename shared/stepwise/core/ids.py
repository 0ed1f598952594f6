"""Identifiers: a type prefix and a ULID, so ids sort by creation time (newest-first listings are a
reverse range query) and say what they name when they turn up in a log."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from datetime import datetime

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


_last = [0]  # the last ULID this process made from the clock (monotonic mode)
_last_lock = threading.Lock()


def ulid(now_ms: int | None = None, tail: bytes | None = None) -> str:
    """26 characters: 48 bits of milliseconds, then 80 bits (random unless `tail` is given), in
    Crockford base32. Made from the clock, ULIDs are monotonic within the process (the spec's monotonic
    mode: one made in the same millisecond as the last is the last plus one), so ids made one after
    the other sort in that order even when their times, kept to the millisecond, are equal."""
    if now_ms is None and tail is None:
        with _last_lock:
            value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
            if value >> 80 <= _last[0] >> 80:
                value = _last[0] + 1
            _last[0] = value
    else:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        value = (ms << 80) | int.from_bytes((tail or os.urandom(10))[:10].rjust(10, b"\0"), "big")
    chars = []
    for _ in range(26):
        value, rem = divmod(value, 32)
        chars.append(_CROCKFORD[rem])
    return "".join(reversed(chars))


def ulid_ms(value: str) -> int | None:
    """The milliseconds a ULID was made at (its first 48 bits), or None for what is not a ULID."""
    if len(value) != 26 or any(c not in _CROCKFORD for c in value):
        return None
    ms = 0
    for char in value[:10]:
        ms = ms * 32 + _CROCKFORD.index(char)
    return ms


def new_id(prefix: str) -> str:
    return f"{prefix}_{ulid()}"


def derived_id(prefix: str, at: datetime, *key: str) -> str:
    """`<prefix>_<ULID>` whose time part is `at` and whose other 80 bits are a hash of `key`: the same
    inputs give the same id (a duplicate delivery is recognised), and ids still sort by `at`."""
    digest = hashlib.sha256("\x1f".join(key).encode()).digest()[:10]
    return f"{prefix}_{ulid(int(at.timestamp() * 1000), digest)}"


# --- Patterns: what an id we issued looks like, checked wherever one comes back from outside ---------

_ULID = "[0-9A-HJKMNP-TV-Z]{26}"  # Crockford base32 as ulid() writes it: upper case, no I, L, O, U
AGENT_ID = rf"^agt_{_ULID}$"
RUN_ID = rf"^run_{_ULID}$"
SESSION_ID = rf"^ses_{_ULID}$"
HOOK_ID = rf"^hook_{_ULID}$"
SCHEDULE_ID = rf"^sch_{_ULID}$"
# Derived from its run, step and call index (stepwise.loop.calls), so a retried step finds it again.
INTERACTION_ID = rf"^int_{_ULID}_[0-9]{{1,4}}_[0-9]{{1,4}}$"
MEMORY_ID = rf"^mem_{_ULID}$"
EVAL_ID = rf"^eval_{_ULID}$"
EVAL_RUN_ID = rf"^evr_{_ULID}$"
WORKFLOW_ID = rf"^wfl_{_ULID}$"
TRIGGER_ID = rf"^trg_{_ULID}$"
DELIVERY_ID = rf"^dlv_{_ULID}$"
# The app's id for its end user: never "#" (it goes into keys after the tenant and agent, see
# stepwise.memory.store), and nothing a URL or a log line would need to escape.
USER_ID = r"^[A-Za-z0-9_.@:-]{1,128}$"

# Tenant ids come from whoever issues keys (`stepwise keys create --tenant`, STEPWISE_LOCAL_API_KEYS),
# so they are checked rather than trusted: they start every partition key, joined to the rest by "#"
# (stepwise.core.tables.tenant_key), and a tenant id holding "#" could name another tenant's keys.
TENANT_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_TENANT = re.compile(TENANT_ID)


class InvalidTenant(ValueError):
    """A tenant id outside TENANT_ID."""


def valid_tenant(tenant_id: object) -> str:
    """`tenant_id` itself when it matches TENANT_ID, else InvalidTenant."""
    if not isinstance(tenant_id, str) or not _TENANT.fullmatch(tenant_id):
        raise InvalidTenant(
            f"tenant id {tenant_id!r} is not valid: 1 to 64 of letters, digits, '_', '.' and '-', "
            "starting with a letter or digit"
        )
    return tenant_id
