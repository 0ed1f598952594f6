"""Helpers shared by the end-to-end tests."""

from __future__ import annotations

import socket

READY = "Stepwise local stack is ready"
KEY = "sk-local-dev"
OTHER_KEY = "sk-e2e-other"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
