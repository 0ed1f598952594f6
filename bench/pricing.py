"""AWS list prices (us-east-1, on demand, no free tier) and what the bench's counts cost.

Prices, checked 2026-12 against the public pricing pages:
- DynamoDB on demand: $0.625 per million write request units, $0.125 per million read request units
  (aws.amazon.com/dynamodb/pricing/on-demand/; halved on 2024-11-01 from $1.25 / $0.25, which
  LEGACY_DYNAMODB keeps for comparison with figures computed before);
- Step Functions Standard: $0.025 per 1,000 state transitions (aws.amazon.com/step-functions/pricing/);
- Lambda: $0.20 per million requests; duration $0.0000133334 per GB-s on arm64, $0.0000166667 on x86_64
  (first pricing tier; aws.amazon.com/lambda/pricing/);
- API Gateway: HTTP API $1.00 per million requests; WebSocket API $1.00 per million messages (sent or
  received, in 32 KB units) and $0.25 per million connection-minutes (aws.amazon.com/api-gateway/pricing/).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MILLION = 1_000_000
DYNAMODB_WRU = 0.625 / MILLION
DYNAMODB_RRU = 0.125 / MILLION
LEGACY_DYNAMODB = {"wru": 1.25 / MILLION, "rru": 0.25 / MILLION}
SFN_TRANSITION = 0.025 / 1000
LAMBDA_REQUEST = 0.20 / MILLION
LAMBDA_GB_SECOND = {"arm64": 0.0000133334, "x86_64": 0.0000166667}
HTTP_API_REQUEST = 1.00 / MILLION
WEBSOCKET_MESSAGE = 1.00 / MILLION
WEBSOCKET_CONNECTION_MINUTE = 0.25 / MILLION
WEBSOCKET_MESSAGE_BYTES = 32 * 1024

# Durations the local run cannot show, added to the invocations that made the call. Assumptions, stated
# in every report that uses them.
MODEL_CALL_SECONDS = 2.0  # one model call of a hosted LLM (the scripted model answers in ~0 s)
TOOL_CALL_SECONDS = 0.2  # one HTTP tool request (the loopback tool answers in ~0 s)


@dataclass(frozen=True)
class Function:
    """A Lambda function as template.yaml configures it."""

    name: str
    memory_mb: int
    architecture: str = "arm64"

    def cost(self, invocations: int, seconds: float) -> float:
        gb_s = self.memory_mb / 1024 * seconds
        return invocations * LAMBDA_REQUEST + gb_s * LAMBDA_GB_SECOND[self.architecture]


def functions_from_template(template: Mapping[str, Any]) -> dict[str, Function]:
    """Every AWS::Serverless::Function's memory and architecture, Globals applied."""
    glob = (template.get("Globals") or {}).get("Function") or {}
    out = {}
    for logical, res in (template.get("Resources") or {}).items():
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        props = res.get("Properties") or {}
        arch = (props.get("Architectures") or glob.get("Architectures") or ["x86_64"])[0]
        memory = int(props.get("MemorySize") or glob.get("MemorySize") or 128)
        out[logical] = Function(logical, memory, str(arch))
    return out


@dataclass
class Usage:
    """What some work used, by service; `cost()` prices it."""

    transitions: int = 0
    rru: float = 0.0
    wru: float = 0.0
    http_api_requests: int = 0
    ws_messages: int = 0
    ws_connection_minutes: float = 0.0
    # function → (invocations, billed seconds)
    lambdas: dict[str, tuple[int, float]] = field(default_factory=dict)

    def add_lambda(self, function: str, invocations: int, seconds: float) -> None:
        n, s = self.lambdas.get(function, (0, 0.0))
        self.lambdas[function] = (n + invocations, s + seconds)

    def cost(self, functions: Mapping[str, Function]) -> dict[str, float]:
        """USD by service."""
        return {
            "Step Functions": self.transitions * SFN_TRANSITION,
            "Lambda": sum(functions[f].cost(n, s) for f, (n, s) in self.lambdas.items()),
            "DynamoDB": self.rru * DYNAMODB_RRU + self.wru * DYNAMODB_WRU,
            "API Gateway": self.http_api_requests * HTTP_API_REQUEST
            + self.ws_messages * WEBSOCKET_MESSAGE
            + self.ws_connection_minutes * WEBSOCKET_CONNECTION_MINUTE,
        }


def per_thousand(costs: Mapping[str, float]) -> dict[str, float]:
    return {k: v * 1000 for k, v in costs.items()}
