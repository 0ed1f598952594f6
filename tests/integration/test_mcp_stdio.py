"""stdio MCP servers on the local stack: refused unless the operator sets STEPWISE_ALLOW_STDIO_MCP=true;
when allowed, a real process (tests/fakes/mcp_stdio_server.py) is spawned for each discovery and each
call, in a fresh directory, with a time limit and only the environment its config names."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stepwise import mcp
from stepwise.agents import mcp_store as store
from stepwise.core.masking import MASK
from stepwise.mcp.stdio import ALLOW_ENV
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.eventually import eventually
from tests.fakes.mcp_stdio_server import STDIO_SERVER
from tests.integration.support import wait_for_run


def call(server: Any, tool: str, arguments: dict[str, Any], agent_id: str) -> Any:
    return mcp.call_tool(server, tool, arguments, tenant_id=DEFAULT_TENANT, agent_id=agent_id)


SERVER = {"name": "local", "transport": "stdio", "command": sys.executable, "args": [STDIO_SERVER]}


@pytest.fixture
def agent_id(stack: LocalStack) -> str:
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "stdio"})
    assert status == 201, body
    return str(body["agent_id"])


@pytest.fixture
def allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_ENV, "true")


def register(stack: LocalStack, agent_id: str, body: dict[str, Any]) -> tuple[int, Any]:
    status, _, answer = stack.invoke_api("POST", f"/v1/agents/{agent_id}/mcp-servers", body)
    return status, answer


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def gone(pid: int, within: float = 10.0) -> bool:
    return eventually(lambda: not alive(pid), timeout=within, what=f"process {pid} to exit")


@pytest.mark.parametrize("setting", [None, "false", "1", "yes"])
def test_stdio_is_refused_unless_the_operator_says_true(
    stack: LocalStack, agent_id: str, monkeypatch: pytest.MonkeyPatch, setting: str | None
) -> None:
    if setting is None:
        monkeypatch.delenv(ALLOW_ENV, raising=False)
    else:
        monkeypatch.setenv(ALLOW_ENV, setting)

    status, body = register(stack, agent_id, SERVER)

    assert status == 422, body
    assert body["error"]["code"] == "stdio_not_allowed" and ALLOW_ENV in body["error"]["message"]
    assert store.list_servers(DEFAULT_TENANT, agent_id) == []


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"command": None}, "needs a command"),
        ({"url": "http://127.0.0.1:1/mcp"}, "url and headers"),
        ({"env": {"BAD-NAME": "x"}}, "environment variable name"),
        ({"args": ["a\x00b"]}, "NUL"),
        ({"transport": "streamable_http"}, "url is required"),
    ],
)
def test_a_malformed_stdio_config_is_422_even_when_allowed(
    stack: LocalStack, agent_id: str, allowed: None, extra: dict[str, Any], needle: str
) -> None:
    body = {k: v for k, v in {**SERVER, **extra}.items() if v is not None}

    status, answer = register(stack, agent_id, body)

    assert status == 422 and needle in json.dumps(answer["error"]), answer


def test_when_allowed_discovery_spawns_the_server_and_the_view_masks_its_env(
    stack: LocalStack, agent_id: str, allowed: None
) -> None:
    status, body = register(stack, agent_id, {**SERVER, "env": {"GREETING": "hi", "TOKEN": "s3cret"}})

    assert status == 201, body
    assert {t["name"] for t in body["tools"]} == {"env", "cwd", "pid", "slow"}
    assert body["last_error"] is None and body["transport"] == "stdio" and body["url"] is None
    assert body["command"] == sys.executable and body["args"] == [STDIO_SERVER]
    assert body["env"] == {"GREETING": MASK, "TOKEN": MASK}
    _, _, shown = stack.invoke_api("GET", f"/v1/agents/{agent_id}/mcp-servers/local")
    assert "s3cret" not in json.dumps(shown)


def test_the_process_sees_only_the_env_its_config_names(
    stack: LocalStack, agent_id: str, allowed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the function's environment holds secrets of its own
    monkeypatch.setenv("STEPWISE_TEST_SECRET", "do-not-leak")
    register(stack, agent_id, {**SERVER, "env": {"GREETING": "hi"}})
    server = store.get_server(DEFAULT_TENANT, agent_id, "local")

    def env(name: str) -> Any:
        return call(server, "env", {"name": name}, agent_id).output

    # Then the process sees what its config names, and not the function's secrets or credentials
    assert env("GREETING") == "hi"
    assert env("STEPWISE_TEST_SECRET") == "<unset>"
    assert env("AWS_SECRET_ACCESS_KEY") == "<unset>" and env("AGENTS_TABLE") == "<unset>"
    assert os.environ["AWS_SECRET_ACCESS_KEY"]  # (the function does have them)


def test_each_call_is_a_fresh_process_in_a_fresh_directory_that_is_gone_afterwards(
    stack: LocalStack, agent_id: str, allowed: None
) -> None:
    register(stack, agent_id, SERVER)
    server = store.get_server(DEFAULT_TENANT, agent_id, "local")

    first, second = (int(call(server, "pid", {}, agent_id).output) for _ in range(2))
    workdir = call(server, "cwd", {}, agent_id).output

    assert first != second and gone(first) and gone(second)
    assert Path(workdir).name.startswith("mcp-stdio-") and not Path(workdir).exists()
    assert Path(workdir).resolve() != Path.cwd().resolve()


def test_a_call_past_its_time_limit_is_cut_and_the_process_killed(
    stack: LocalStack, agent_id: str, allowed: None, tmp_path: Path
) -> None:
    register(stack, agent_id, SERVER)
    server = store.get_server(DEFAULT_TENANT, agent_id, "local")
    pidfile = tmp_path / "pid"

    started = time.monotonic()
    result = mcp.call_tool(
        server,
        "slow",
        {"seconds": 60, "pidfile": str(pidfile)},
        tenant_id=DEFAULT_TENANT,
        agent_id=agent_id,
        timeout=2,
    )

    assert result.error is not None and result.error.code == "mcp_unavailable"
    assert "did not answer within 2 s" in result.error.message
    assert time.monotonic() - started < 15
    assert gone(int(pidfile.read_text()))


def test_a_server_that_cannot_start_is_registered_with_its_stderr_as_the_error(
    stack: LocalStack, agent_id: str, allowed: None
) -> None:
    crash = "import sys; sys.stderr.write('missing GITHUB_TOKEN'); sys.exit(3)"

    status, body = register(stack, agent_id, {**SERVER, "args": ["-c", crash]})

    assert status == 201, body
    assert body["tools"] == [] and "missing GITHUB_TOKEN" in body["last_error"]


def test_a_servers_stderr_is_quoted_short_and_masked(stack: LocalStack, agent_id: str, allowed: None) -> None:
    # Review finding 3: a stdio server's stderr came back whole in last_error, which the API returns.
    noisy = (
        "import sys\n"
        "sys.stderr.write('x' * 2000 + '\\n')\n"
        "sys.stderr.write('AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\\n')\n"
        "sys.stderr.write('failed with token=tok-123 as AKIAIOSFODNN7EXAMPLE\\n')\n"
        "sys.exit(3)\n"
    )

    status, body = register(stack, agent_id, {**SERVER, "args": ["-c", noisy]})

    assert status == 201, body
    error = body["last_error"]
    assert "failed with token=" in error and len(error) < 500  # its last words, not the whole stream
    assert "wJalrXUtnFEMI" not in error and "tok-123" not in error and "AKIAIOSFODNN7EXAMPLE" not in error


def test_a_missing_command_is_a_recorded_error(stack: LocalStack, agent_id: str, allowed: None) -> None:
    status, body = register(stack, agent_id, {**SERVER, "command": "/nonexistent/mcp-server", "args": []})

    assert status == 201, body
    assert body["tools"] == [] and "/nonexistent/mcp-server" in body["last_error"]


def test_turning_stdio_off_stops_stored_servers_at_once(
    stack: LocalStack, agent_id: str, allowed: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    register(stack, agent_id, SERVER)
    server = store.get_server(DEFAULT_TENANT, agent_id, "local")
    monkeypatch.setenv(ALLOW_ENV, "false")
    pidfile = tmp_path / "pid"

    result = mcp.call_tool(
        server, "slow", {"seconds": 0, "pidfile": str(pidfile)}, tenant_id=DEFAULT_TENANT, agent_id=agent_id
    )

    assert result.error is not None and result.error.code == "mcp_unavailable"
    assert ALLOW_ENV in result.error.message
    assert not pidfile.exists()  # nothing was spawned


def test_a_run_calls_a_stdio_tool(stack: LocalStack, agent_id: str, allowed: None) -> None:
    # (allowed outright: an untrusted server's tools would all ask a human first)
    register(stack, agent_id, {**SERVER, "env": {"GREETING": "hello from stdio"}, "permission": "allow"})
    script = [
        {"tool_calls": [{"name": "mcp__local__env", "arguments": {"name": "GREETING"}}]},
        {"text": "done"},
    ]

    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go", "script": script}
    )
    run = wait_for_run(stack, accepted["run_id"])

    assert run["status"] == "succeeded" and run["tools_executed"] == ["mcp__local__env"]
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/events?after=0&wait=2")
    (result,) = [e["data"] for e in page["events"] if e["type"] == "tool_result"]
    assert result["output"] == "hello from stdio"
