"""Identifiers: a type prefix and a ULID, so ids sort by creation time (newest-first listings are a
reverse range query) and say what they name when they turn up in a log."""

from __future__ import annotations

import hashlib
import os
import time
from datetime import datetime

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid(now_ms: int | None = None, tail: bytes | None = None) -> str:
    """26 characters: 48 bits of milliseconds, then 80 bits (random unless `tail` is given), in
    Crockford base32."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms << 80) | int.from_bytes((tail or os.urandom(10))[:10].rjust(10, b"\0"), "big")
    chars = []
    for _ in range(26):
        value, rem = divmod(value, 32)
        chars.append(_CROCKFORD[rem])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    return f"{prefix}_{ulid()}"


def derived_id(prefix: str, at: datetime, *key: str) -> str:
    """`<prefix>_<ULID>` whose time part is `at` and whose other 80 bits are a hash of `key`: the same
    inputs give the same id (a duplicate delivery is recognised), and ids still sort by `at`."""
    digest = hashlib.sha256("\x1f".join(key).encode()).digest()[:10]
    return f"{prefix}_{ulid(int(at.timestamp() * 1000), digest)}"
