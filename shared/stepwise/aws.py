"""boto3 clients, built on first use and reused across invocations of a warm Lambda."""

from __future__ import annotations

from functools import cache
from typing import Any

import boto3


@cache
def client(service: str) -> Any:
    return boto3.client(service)


def reset() -> None:
    client.cache_clear()
