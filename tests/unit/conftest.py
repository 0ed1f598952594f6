"""Unit tests are pure: any attempt to open an internet socket fails the test."""

import socket
from collections.abc import Iterator

import pytest


class NetworkBlocked(RuntimeError):
    pass


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    original = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise NetworkBlocked(f"unit tests may not open sockets (tried {address!r})")
        original(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", guarded)
    # The integration stack (when it ran first in this session) exempts loopback from the SSRF guard;
    # unit tests see the default: nothing exempt.
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS", raising=False)
    yield
