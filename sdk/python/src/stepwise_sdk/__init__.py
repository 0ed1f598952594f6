"""The Stepwise Python SDK: typed sync and async clients of the Stepwise HTTP API.

from stepwise_sdk import Stepwise

with Stepwise(base_url="http://127.0.0.1:3000", api_key="sk-local-dev") as client:
    agent = client.agents.create(name="helper")
    run = client.runs.create(agent.agent_id, message="Hello")
    for event in client.runs.events(run.run_id):
        print(event.seq, event.type, event.data)
"""

from stepwise_sdk._async import AsyncEventStream, AsyncStepwise
from stepwise_sdk._core import VERSION, RetryPolicy
from stepwise_sdk._sync import EventStream, Stepwise
from stepwise_sdk.errors import (
    ApiConnectionError,
    ApiStatusError,
    ApiTimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    GoneError,
    InvalidResponse,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    ServerError,
    StepwiseError,
    UnprocessableError,
    WaitTimeout,
)

__version__ = VERSION
__all__ = [
    "ApiConnectionError",
    "ApiStatusError",
    "ApiTimeoutError",
    "AsyncEventStream",
    "AsyncStepwise",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "EventStream",
    "GoneError",
    "InvalidResponse",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "RetryPolicy",
    "ServerError",
    "Stepwise",
    "StepwiseError",
    "UnprocessableError",
    "WaitTimeout",
]
