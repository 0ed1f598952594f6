"""boto3 clients, built on first use and reused across invocations of a warm Lambda.

Clients come from one private session under a lock: boto3's default session is not safe to build
clients from in several threads at once, and the local stack runs many steps (and moto's own
interpreter threads) in one process.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

import boto3

_lock = threading.Lock()


@cache
def _session() -> boto3.session.Session:
    return boto3.session.Session()


def client(service: str, **kwargs: Any) -> Any:
    """A cached client for `service` (kwargs such as region_name or config are part of the key)."""
    key = (service, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    with _lock:
        found = _clients.get(key)
        if found is None:
            found = _clients[key] = _session().client(service, **kwargs)
        return found


_clients: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}


def reset() -> None:
    """Forget every client (and the session): after a SnapStart restore, or when the environment changed."""
    with _lock:
        _clients.clear()
        _session.cache_clear()
