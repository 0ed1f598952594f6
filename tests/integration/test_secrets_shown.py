"""Secrets stay secret: header values of custom tools, http hooks and MCP servers never come back from
the API; an approval link never reaches a log in AWS; the model's SQL never reaches one through sqlglot."""

import logging
from datetime import timedelta
from typing import Any

import pytest

from stepwise.approvals import notify
from stepwise.core.masking import MASK
from stepwise.core.schema import utcnow
from stepwise.interactions.models import Interaction
from stepwise.tools.builtin import _sql, database_query
from stepwise_local.stack import LocalStack
from tests.integration.support import tool

SECRET = "Bearer sk-live-very-secret"


def test_header_values_are_masked_in_every_answer_that_shows_them(stack: LocalStack) -> None:
    _, _, created = stack.invoke_api(
        "POST",
        "/v1/agents",
        {
            "name": "secrets",
            "tools": [tool("first", "https://tools.example/a", headers={"Authorization": SECRET})],
        },
    )
    agent_id = created["agent_id"]
    shown: list[Any] = [created]
    shown.append(
        stack.invoke_api(
            "POST",
            f"/v1/agents/{agent_id}/tools",
            tool("second", "https://tools.example/b", headers={"X-Api-Key": SECRET}),
        )[2]
    )
    hook = {
        "event": "PreToolUse",
        "type": "http",
        "config": {"url": "https://hooks.example/h", "headers": {"Authorization": SECRET}},
    }
    status, _, created_hook = stack.invoke_api("POST", f"/v1/agents/{agent_id}/hooks", hook)
    assert status == 201
    server = {
        "name": "srv",
        "url": "http://127.0.0.1:9/mcp",
        "headers": {"Authorization": SECRET},
        "enabled": False,
    }
    assert stack.invoke_api("POST", f"/v1/agents/{agent_id}/mcp-servers", server)[0] == 201
    shown += [
        created_hook,
        stack.invoke_api("GET", f"/v1/agents/{agent_id}")[2],
        stack.invoke_api("GET", "/v1/agents")[2],
        stack.invoke_api("GET", f"/v1/agents/{agent_id}/tools")[2],
        stack.invoke_api("GET", f"/v1/agents/{agent_id}/hooks")[2],
        stack.invoke_api("PATCH", f"/v1/agents/{agent_id}", {"name": "renamed"})[2],
        stack.invoke_api("GET", f"/v1/agents/{agent_id}/mcp-servers")[2],
    ]
    assert all(SECRET not in repr(answer) for answer in shown)
    agent = stack.invoke_api("GET", f"/v1/agents/{agent_id}")[2]
    assert [t["headers"] for t in agent["tools"]] == [{"Authorization": MASK}, {"X-Api-Key": MASK}]
    assert agent["hooks"][0]["config"]["headers"] == {"Authorization": MASK}
    assert agent["mcp_servers"][0]["headers"] == {"Authorization": MASK}
    assert created_hook["config"]["headers"] == {"Authorization": MASK}

    # Stored sealed (KMS ciphertext for this tenant), opened as given where a call is made.
    from stepwise.agents import store as agents
    from stepwise.core.masking import is_sealed
    from stepwise.header_secrets import open_headers

    stored = agents.get("local", agent_id)
    tool_headers = {t.name: t.headers for t in stored.tools if hasattr(t, "headers")}["first"]
    hook_headers = stored.hooks[0]["config"]["headers"]
    assert is_sealed(tool_headers["Authorization"]) and is_sealed(hook_headers["Authorization"])
    assert (
        open_headers("local", tool_headers)
        == open_headers("local", hook_headers)
        == {"Authorization": SECRET}
    )


def interaction(agent_id: str) -> Interaction:
    now = utcnow()
    return Interaction(
        interaction_id="int_01J0000000000000000000000A_1_0",
        run_id="run_01J0000000000000000000000A",
        session_id="ses_01J0000000000000000000000A",
        agent_id=agent_id,
        kind="approval",
        status="pending",
        step=1,
        tool_call_id="call_1",
        tool_call_index=0,
        tool_name="send",
        arguments={"to": "x"},
        digest="d",
        timeout_seconds=300,
        channels=[{"type": "email", "to": ["approver@example.com"]}],
        created_at=now,
        deadline=now + timedelta(minutes=5),
    )


def test_in_aws_no_sender_means_no_mail_and_a_warning_without_the_link(
    stack: LocalStack,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent_id = stack.invoke_api("POST", "/v1/agents", {"name": "approvals"})[2]["agent_id"]
    link = "https://api.example/v1/approvals/signed-token-that-is-a-credential"
    monkeypatch.delenv("STEPWISE_CHANNELS", raising=False)  # as in AWS
    monkeypatch.setenv("APPROVAL_SENDER", "")

    with caplog.at_level(logging.DEBUG):
        notify.tell_humans(interaction(agent_id), link, agent_name="approvals")

    printed = capsys.readouterr()
    assert "signed-token-that-is-a-credential" not in printed.out + printed.err + caplog.text
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("approval email not sent" in w and "APPROVAL_SENDER" in w for w in warnings), warnings


def test_the_local_stack_still_prints_the_mail_with_its_link(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    agent_id = stack.invoke_api("POST", "/v1/agents", {"name": "approvals"})[2]["agent_id"]
    monkeypatch.setenv("STEPWISE_CHANNELS", "console")
    link = "http://127.0.0.1:3000/v1/approvals/local-token"

    notify.tell_humans(interaction(agent_id), link, agent_name="approvals")

    assert "local-token" in capsys.readouterr().out


def test_sqlglots_warnings_never_log_the_models_sql(caplog: pytest.LogCaptureFixture) -> None:
    allow = _sql.Allowlist(database_query.Config(allowed_tables=["orders"]), _sql.FLAVORS["sqlite"])
    sql = "SHOW password_of_the_ceo 'hunter2'"  # sqlglot parses this as a Command, with a warning
    with caplog.at_level(logging.DEBUG), pytest.raises(_sql.Refused):
        _sql.check_query(sql, allow)
    assert not [r for r in caplog.records if r.name.startswith("sqlglot")]
    assert "hunter2" not in caplog.text
