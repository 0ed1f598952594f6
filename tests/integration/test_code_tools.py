"""Code tools in real runs: the tenant's `run(args)` executes in a code sandbox on loopback that really
runs it (tests/fakes/sandbox.py), never in the Stepwise process, and its JSON return is the result."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise_local.stack import LocalStack
from tests.fakes.sandbox import FakeSandbox
from tests.integration.support import OTHER_KEY, wait_for_run

SANDBOX_KEY = "sandbox-secret"
ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
PY_ADD = (
    "import math\n\ndef run(args):\n    print('working on it')\n    return {'sum': args['a'] + args['b']}\n"
)
JS_ADD = (
    "export async function run({ a, b }) {\n  console.log('working');\n"
    "  return { sum: a + b, lang: 'js' };\n}\n"
)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[FakeSandbox]:
    server = FakeSandbox(api_key=SANDBOX_KEY)
    yield server
    server.close()


@pytest.fixture
def configured(stack: LocalStack, sandbox: FakeSandbox) -> Iterator[FakeSandbox]:
    """The local tenant's settings point at the sandbox (the other tenant's do not)."""
    for key, value in {"CODE_SANDBOX_URL": sandbox.url, "CODE_SANDBOX_API_KEY": SANDBOX_KEY}.items():
        status, _, body = stack.invoke_api("PUT", f"/v1/settings/{key}", {"value": value})
        assert status in (200, 201), body
    sandbox.requests.clear()
    yield sandbox
    for key in ("CODE_SANDBOX_URL", "CODE_SANDBOX_API_KEY"):
        stack.invoke_api("DELETE", f"/v1/settings/{key}")


def code_tool(name: str, language: str, source: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "code",
        "name": name,
        "description": f"{name} in {language}",
        "input_schema": extra.pop("input_schema", ADD_SCHEMA),
        "language": language,
        "source": source,
        **extra,
    }


def run_calls(
    stack: LocalStack, tool: dict[str, Any], *calls: dict[str, Any], key: str | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run whose scripted model calls `tool` with each of `calls`, one per step; the run and its
    tool results."""
    kwargs = {"key": key} if key else {}
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "coder", "tools": [tool]}, **kwargs)
    assert status == 201, agent
    script = [{"tool_calls": [{"name": tool["name"], "arguments": c}]} for c in calls] + [{"text": "done"}]
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go", "script": script}, **kwargs
    )
    run = wait_for_run(stack, accepted["run_id"], key=key)
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/events?after=0&wait=2", **kwargs)
    return run, [e["data"] for e in page["events"] if e["type"] == "tool_result"]


def test_a_python_tool_returns_its_value_from_the_sandbox(stack: LocalStack, configured: FakeSandbox) -> None:
    # Given a Python code tool
    # When the model calls it
    run, (result,) = run_calls(stack, code_tool("add", "python", PY_ADD), {"a": 2, "b": 40})

    # Then the result is the function's return value, not what it printed
    assert run["status"] == "succeeded" and run["tools_executed"] == ["add"]
    assert result["output"] == {"sum": 42}

    # And the source ran in the sandbox, sent with the tenant's sandbox key and the tool's timeout
    (request,) = configured.requests
    assert request["path"] == "/execute"
    assert request["body"]["language"] == "python" and request["body"]["timeout_seconds"] == 30
    assert repr(PY_ADD) in request["body"]["code"]  # the stored source, inside the harness


def test_a_javascript_module_tool_runs_and_may_be_async(stack: LocalStack, configured: FakeSandbox) -> None:
    run, (result,) = run_calls(stack, code_tool("add_js", "javascript", JS_ADD), {"a": 1, "b": 2})

    assert run["status"] == "succeeded"
    assert result["output"] == {"sum": 3, "lang": "js"}
    assert configured.requests[0]["body"]["language"] == "javascript"


@pytest.mark.parametrize(
    ("language", "source"),
    [
        ("python", "def run(args):\n    return {'echo': args, 'note': '\"\\'`${x}` \U0001f600'}\n"),
        (
            "javascript",
            "export function run(args) {\n  return { echo: args, note: '\"\\'`${x}` \U0001f600' };\n}\n",
        ),
    ],
)
def test_arguments_and_results_cross_the_harness_intact(
    stack: LocalStack, configured: FakeSandbox, language: str, source: str
) -> None:
    tricky = {
        "text": "'\"`${process.exit()}` \\ \U0001f600 \u2028",
        "nested": [1, 2.5, None, True, {"k": "v"}],
    }

    _, (result,) = run_calls(
        stack, code_tool("echo", language, source, input_schema={"type": "object"}), tricky
    )

    assert result["output"] == {"echo": tricky, "note": "\"'`${x}` \U0001f600"}


def test_arguments_are_validated_before_the_sandbox_is_called(
    stack: LocalStack, configured: FakeSandbox
) -> None:
    run, (result,) = run_calls(stack, code_tool("add", "python", PY_ADD), {"a": "two", "b": 2})

    assert run["status"] == "succeeded"
    assert result["error"]["code"] == "invalid_arguments" and "a" in result["error"]["message"]
    assert configured.requests == []


def test_code_past_its_timeout_is_stopped(stack: LocalStack, configured: FakeSandbox) -> None:
    source = "import time\n\ndef run(args):\n    time.sleep(30)\n    return 1\n"
    tool = code_tool("slow", "python", source, input_schema={"type": "object"}, timeout_seconds=1)

    _, (result,) = run_calls(stack, tool, {})

    assert result["error"] == {
        "code": "timeout",
        "message": "slow did not finish within 1 seconds and was stopped",
    }
    assert configured.requests[0]["body"]["timeout_seconds"] == 1


@pytest.mark.parametrize(
    ("language", "source", "expected"),
    [
        (
            "python",
            "def run(args):\n    return helper(args)\n\n"
            "def helper(args):\n    raise KeyError('missing: ' + args['k'])\n",
            ["KeyError", "missing: x", 'File "tool.py", line 5, in helper'],
        ),
        (
            "javascript",
            "export function run(args) {\n  throw new RangeError(`out of range: ${args.k}`);\n}\n",
            ["RangeError", "out of range: x", "tool.mjs:2"],
        ),
    ],
)
def test_an_exception_is_an_error_result_with_the_tools_own_trace(
    stack: LocalStack, configured: FakeSandbox, language: str, source: str, expected: list[str]
) -> None:
    tool = code_tool("boom", language, source, input_schema={"type": "object"})

    run, (result,) = run_calls(stack, tool, {"k": "x"})

    assert run["status"] == "succeeded"  # the model reads the error and goes on
    assert result["error"]["code"] == "code_error"
    message = result["error"]["message"]
    assert all(part in message for part in expected), message
    assert "_stepwise_main" not in message and "main.js" not in message  # the harness stays out of it


@pytest.mark.parametrize(
    ("language", "source", "kind"),
    [
        ("python", "def run(args):\n    return {1, 2}\n", "set"),
        ("python", "def run(args):\n    return float('inf')\n", "float"),
        ("javascript", "export function run(args) { return undefined; }", "undefined"),
        ("javascript", "export function run(args) { return { n: NaN }; }", "object"),
    ],
)
def test_a_return_value_that_is_not_json_is_an_invalid_result(
    stack: LocalStack, configured: FakeSandbox, language: str, source: str, kind: str
) -> None:
    _, (result,) = run_calls(stack, code_tool("odd", language, source, input_schema={"type": "object"}), {})

    assert result["error"]["code"] == "invalid_result"
    assert f"({kind})" in result["error"]["message"]


def test_without_a_sandbox_the_call_is_a_clear_error_for_that_tenant_only(
    stack: LocalStack, configured: FakeSandbox
) -> None:
    # The other tenant has no CODE_SANDBOX_URL: the local tenant's setting is not theirs to use
    _, (result,) = run_calls(stack, code_tool("add", "python", PY_ADD), {"a": 1, "b": 1}, key=OTHER_KEY)

    assert result["error"] == {"code": "not_configured", "message": "Code sandbox is not configured"}
    assert configured.requests == []


@pytest.mark.parametrize(
    ("tool", "needle"),
    [
        (code_tool("bad", "python", "def run(args):\n  return (\n"), "not valid Python: line"),
        (code_tool("bad", "python", "def main(args):\n    return 1\n"), "def run(args)"),
        (code_tool("bad", "javascript", "function run(args) { return 1; }"), "export function run(args)"),
        (code_tool("bad", "ruby", "def run(args) end"), "language"),
        (code_tool("bad", "python", PY_ADD, timeout_seconds=121), "timeout_seconds"),
        (code_tool("bad", "python", PY_ADD, input_schema={"type": "array"}), "object"),
        (code_tool("bad", "python", "#" * 64_001 + "\ndef run(a): pass"), "source"),
    ],
)
def test_a_broken_code_tool_is_refused_at_creation(
    stack: LocalStack, tool: dict[str, Any], needle: str
) -> None:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "coder"})
    assert status == 201

    status, _, body = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/tools", tool)

    assert status == 422, body
    assert needle in json.dumps(body["error"])
    _, _, listed = stack.invoke_api("GET", f"/v1/agents/{agent['agent_id']}/tools")
    assert listed["tools"] == []


def test_a_code_tool_is_stored_declared_and_described_in_the_spec(stack: LocalStack) -> None:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "coder"})
    tool = code_tool("add", "python", PY_ADD, read_only=True, timeout_seconds=5)

    status, _, created = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/tools", tool)

    assert status == 201, created
    _, _, listed = stack.invoke_api("GET", f"/v1/agents/{agent['agent_id']}/tools")
    (stored,) = listed["tools"]
    assert stored["source"] == PY_ADD and stored["timeout_seconds"] == 5 and stored["read_only"] is True
    _, _, spec = stack.invoke_api("GET", "/v1/openapi.json")
    assert "CodeTool" in json.dumps(spec["components"]["schemas"])
