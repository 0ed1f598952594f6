"""Helpers shared by the end-to-end tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

READY = "Stepwise local stack is ready"
KEY = "sk-local-dev"
OTHER_KEY = "sk-e2e-other"
T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.1) -> T:
    """Calls probe until it returns something other than None, or fails at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(interval)
