"""What the real database servers the tests start (tests/fakes/postgres.py, mysql.py) share: a free
loopback port, and the unprivileged user a server must run as when the tests run as root."""

from __future__ import annotations

import contextlib
import os
import pwd
import socket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_as(*users: str) -> str | None:
    """None when not root (the server runs as us); as root, the first of `users` that exists, since
    neither PostgreSQL nor MariaDB runs as root."""
    if os.geteuid() != 0:
        return None
    for name in users:
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name).pw_name
    raise RuntimeError(f"running as root and no unprivileged user ({', '.join(users)}) to run the server as")
