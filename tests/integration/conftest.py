"""The local stack in process (moto + the real ASL + our handlers), shared by the integration tests.

Each test works in its own agents and sessions, so sharing one stack keeps them independent."""

import os
from collections.abc import Iterator

import pytest

from stepwise_local.stack import LocalStack
from tests.fakes.receiver import Receiver
from tests.integration.support import OTHER_KEY


@pytest.fixture(scope="session")
def stack() -> Iterator[LocalStack]:
    os.environ["STEPWISE_ALLOW_HOSTS"] = "127.0.0.1"
    os.environ["STEPWISE_LOCAL_API_KEYS"] = f"{OTHER_KEY}:other"
    os.environ.pop("STEPWISE_MODEL", None)
    local = LocalStack.start()
    yield local
    local.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    peer = Receiver()
    yield peer
    peer.close()
