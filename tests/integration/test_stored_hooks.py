"""Hooks stored before PreToolUse and OnDelegation failed closed, read back from the agent's item.

Every http hook the API stored back then carries `fail_closed: false` (the default of the day, dumped into
the item) and no shape key: on a gate that false was nobody's choice, so the gate's default applies.
A hook stored now with `fail_closed: false` keeps it."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from stepwise.agents import store as agents
from stepwise.runs import hooks as hook_run
from stepwise_local.stack import LocalStack


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"  # nothing listens there once the probe is closed


def old_item(event: str, url: str) -> dict[str, Any]:
    return {
        "event": event,
        "type": "http",
        "matcher": None,
        "config": {"url": url, "headers": {}, "timeout_seconds": 1.0, "fail_closed": False},
        "enabled": True,
        "position": 0,
        "hook_id": f"hook_old{event.lower()}",
        "created_at": "2026-11-30T12:00:00Z",
    }


@pytest.mark.parametrize("event", ["PreToolUse", "OnDelegation"])
def test_an_old_gate_hook_that_cannot_answer_now_denies(stack: LocalStack, event: str) -> None:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": f"old-hooks-{event}"})
    assert status == 201, agent
    agents.add_hook("local", agent["agent_id"], old_item(event, closed_port_url()))  # the raw old item

    decision = hook_run.fire(
        "local", "run_oldhooks", agents.get("local", agent["agent_id"]), event, tool_name="t", arguments={}
    )
    status, _, shown = stack.invoke_api("GET", f"/v1/agents/{agent['agent_id']}/hooks")

    assert decision.action == "deny"
    assert decision.message is not None and decision.message.startswith("hook unavailable")
    assert status == 200
    assert [h["config"]["fail_closed"] for h in shown["hooks"]] == [True]  # shown as it acts
    assert "shape" not in shown["hooks"][0]


def test_a_gate_hook_created_now_with_fail_closed_false_stays_open(stack: LocalStack) -> None:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "new-open-hook"})
    assert status == 201, agent
    body = {"event": "PreToolUse", "type": "http", "config": {"url": closed_port_url(), "fail_closed": False}}
    status, _, hook = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/hooks", body)
    assert status == 201, hook

    decision = hook_run.fire(
        "local",
        "run_newhook",
        agents.get("local", agent["agent_id"]),
        "PreToolUse",
        tool_name="t",
        arguments={},
    )

    assert decision.action == "allow" and decision.warnings
    assert hook["config"]["fail_closed"] is False and "shape" not in hook
