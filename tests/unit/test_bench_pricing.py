"""The bench's prices (bench/pricing.py) and its attribution of assumed durations (bench/canonical.py)."""

import math
from pathlib import Path

from bench.canonical import billed_seconds
from bench.meter import Invocation
from bench.pricing import (
    DYNAMODB_RRU,
    DYNAMODB_WRU,
    HTTP_API_REQUEST,
    LAMBDA_GB_SECOND,
    LAMBDA_REQUEST,
    MODEL_CALL_SECONDS,
    SFN_TRANSITION,
    TOOL_CALL_SECONDS,
    WEBSOCKET_CONNECTION_MINUTE,
    WEBSOCKET_MESSAGE,
    Function,
    Usage,
    functions_from_template,
)
from stepwise_local.cfn_yaml import load_template

ROOT = Path(__file__).resolve().parents[2]


def test_functions_take_memory_and_architecture_from_the_template_globals_applied() -> None:
    functions = functions_from_template(load_template(ROOT / "template.yaml"))
    assert functions["ApiFunction"] == Function("ApiFunction", 1024, "arm64")
    assert functions["AuthorizerFunction"].memory_mb == 256
    assert functions["FailedFunction"].memory_mb == 512  # Globals


def test_lambda_cost_is_requests_plus_gb_seconds() -> None:
    fn = Function("F", 512, "arm64")
    assert math.isclose(fn.cost(2, 4.0), 2 * LAMBDA_REQUEST + 0.5 * 4.0 * LAMBDA_GB_SECOND["arm64"])


def test_usage_cost_splits_by_service() -> None:
    usage = Usage(transitions=10, rru=4, wru=8, http_api_requests=2, ws_messages=3, ws_connection_minutes=5)
    usage.add_lambda("F", 1, 1.0)
    usage.add_lambda("F", 1, 1.0)
    cost = usage.cost({"F": Function("F", 1024)})
    assert math.isclose(cost["Step Functions"], 10 * SFN_TRANSITION)
    assert math.isclose(cost["DynamoDB"], 4 * DYNAMODB_RRU + 8 * DYNAMODB_WRU)
    assert math.isclose(
        cost["API Gateway"], 2 * HTTP_API_REQUEST + 3 * WEBSOCKET_MESSAGE + 5 * WEBSOCKET_CONNECTION_MINUTE
    )
    assert math.isclose(cost["Lambda"], 2 * LAMBDA_REQUEST + 2.0 * LAMBDA_GB_SECOND["arm64"])


def test_assumed_durations_go_to_the_invocation_that_made_the_call() -> None:
    model = Invocation(1, "Model", "", "", began=0.0, ended=1.0, model_calls=1)
    outer = Invocation(2, "Api", "", "", began=2.0, ended=5.0)
    tool = Invocation(3, "Tool", "Api", "", began=3.0, ended=4.0)
    billed = billed_seconds([model, outer, tool], tool_arrivals=[3.5, 9.0])
    assert billed == {1: 1.0 + MODEL_CALL_SECONDS, 2: 3.0, 3: 1.0 + TOOL_CALL_SECONDS}
