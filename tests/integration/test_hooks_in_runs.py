"""Hooks at every lifecycle point, of every type, inside real runs."""

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import quote, urlparse

import pytest

from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import tool, wait_for_run

CALL = [{"tool_calls": [{"name": "send", "arguments": {"q": "secret plan"}}]}, {"text": "final answer"}]


def agent_with_hooks(stack: LocalStack, receiver: Receiver, *hooks: dict[str, Any]) -> str:
    _, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "hooked", "tools": [tool("send", f"{receiver.url}/send")]}
    )
    for hook in hooks:
        status, _, body = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/hooks", hook)
        assert status == 201, body
    return str(agent["agent_id"])


def run(stack: LocalStack, agent_id: str, message: str = "go", script: Any = CALL) -> dict[str, Any]:
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": message, "script": script}
    )
    return wait_for_run(stack, accepted["run_id"])


def events_of(stack: LocalStack, run_id: str, etype: str) -> list[dict[str, Any]]:
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0&wait=2")
    return [e["data"] for e in page["events"] if e["type"] == etype]


def rule(event: str, field: str, operator: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {
        "event": event,
        "type": "rule",
        "config": {"rules": [{"field": field, "operator": operator, "value": value}]},
        **extra,
    }


def http(event: str, url: str, **config: Any) -> dict[str, Any]:
    return {"event": event, "type": "http", "config": {"url": url, **config}}


def test_hooks_are_created_listed_and_deleted_and_typos_are_rejected(
    stack: LocalStack, receiver: Receiver
) -> None:
    agent_id = agent_with_hooks(stack, receiver)
    base = f"/v1/agents/{agent_id}/hooks"

    status, _, created = stack.invoke_api("POST", base, rule("PreToolUse", "q", "CONTAINS", "x"))
    assert status == 201 and created["hook_id"].startswith("hook_")
    assert [h["hook_id"] for h in stack.invoke_api("GET", base)[2]["hooks"]] == [created["hook_id"]]
    status, _, body = stack.invoke_api("POST", base, rule("PreTooluse", "q", "CONTAINS", "x"))
    assert status == 422 and "OnRunStart" in json.dumps(body) and "PreToolUse" in json.dumps(body)
    status, _, body = stack.invoke_api(
        "POST", base, {**rule("PreToolUse", "q", "MATCHES", "(unclosed"), "type": "rule"}
    )
    assert status == 422
    # A lookahead compiles in Python's re, not in RE2: refused with RE2's reason, not a 500 later.
    status, _, body = stack.invoke_api("POST", base, rule("PreToolUse", "q", "MATCHES", "(?=x)y"))
    assert status == 422 and body["error"]["code"] == "validation_error"
    assert "invalid perl operator" in json.dumps(body) and "RE2" in json.dumps(body)
    status, _, body = stack.invoke_api("POST", base, {"event": "PreToolUse", "type": "webhook", "config": {}})
    assert status == 422 and "http" in json.dumps(body)
    assert stack.invoke_api("PATCH", f"{base}/{created['hook_id']}", {})[0] in (404, 405)  # immutable
    assert stack.invoke_api("DELETE", f"{base}/{created['hook_id']}")[0] == 204
    assert stack.invoke_api("DELETE", f"{base}/{created['hook_id']}")[0] == 404
    assert stack.invoke_api("GET", base)[2]["hooks"] == []


def test_on_run_start_deny_fails_the_run(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent_with_hooks(stack, receiver, rule("OnRunStart", "message", "CONTAINS", "forbidden"))

    result = run(stack, agent_id, message="do the forbidden thing")

    assert result["status"] == "failed" and result["error"]["code"] == "hook_denied"
    assert events_of(stack, result["run_id"], "hook_blocked")[0]["event"] == "OnRunStart"
    assert run(stack, agent_id, message="fine")["status"] == "succeeded"


def test_pre_tool_use_rule_deny_is_an_error_for_the_model(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent_with_hooks(
        stack, receiver, rule("PreToolUse", "q", "CONTAINS", "secret", matcher="send")
    )

    result = run(stack, agent_id)

    assert result["status"] == "succeeded" and receiver.to("/send") == []
    (tool_result,) = events_of(stack, result["run_id"], "tool_result")
    assert tool_result["error"]["code"] == "blocked_by_hook"
    assert events_of(stack, result["run_id"], "hook_blocked")[0]["tool_name"] == "send"


def test_a_hook_for_another_tool_or_disabled_does_not_fire(stack: LocalStack, receiver: Receiver) -> None:
    agent_id = agent_with_hooks(
        stack,
        receiver,
        rule("PreToolUse", "q", "CONTAINS", "secret", matcher="other_tool"),
        rule("PreToolUse", "q", "CONTAINS", "secret", enabled=False),
    )

    assert run(stack, agent_id)["status"] == "succeeded"
    assert len(receiver.to("/send")) == 1


def test_http_hooks_modify_input_and_output(stack: LocalStack, receiver: Receiver) -> None:
    receiver.replies["/pre"] = Reply(body={"action": "allow", "modified_input": {"q": "rewritten"}})
    receiver.replies["/post"] = Reply(body={"action": "allow", "modified_output": {"redacted": True}})
    receiver.replies["/send"] = Reply(body={"raw": "sensitive"})
    agent_id = agent_with_hooks(
        stack,
        receiver,
        http("PreToolUse", f"{receiver.url}/pre"),
        http("PostToolUse", f"{receiver.url}/post"),
    )

    result = run(stack, agent_id)

    assert [r.json() for r in receiver.to("/send")] == [{"q": "rewritten"}]
    (pre,) = [r.json() for r in receiver.to("/pre")]
    assert pre["event"] == "PreToolUse" and pre["tool_name"] == "send" and pre["data"] == {"q": "secret plan"}
    (post,) = [r.json() for r in receiver.to("/post")]
    assert post["event"] == "PostToolUse" and post["output"] == {"raw": "sensitive"}
    assert events_of(stack, result["run_id"], "tool_result")[0]["output"] == {"redacted": True}


def test_pre_response_deny_replaces_the_answer_and_modify_rewrites_it(
    stack: LocalStack, receiver: Receiver
) -> None:
    denying = agent_with_hooks(stack, receiver, rule("PreResponse", "output", "CONTAINS", "final"))
    receiver.replies["/pre-response"] = Reply(body={"modified_output": "rewritten answer"})
    rewriting = agent_with_hooks(stack, receiver, http("PreResponse", f"{receiver.url}/pre-response"))

    blocked = run(stack, denying)
    rewritten = run(stack, rewriting)

    assert blocked["status"] == "succeeded" and "withheld" in blocked["output"], blocked
    assert events_of(stack, blocked["run_id"], "hook_blocked")[0]["event"] == "PreResponse"
    assert rewritten["output"] == "rewritten answer"


def test_on_run_complete_is_told_and_cannot_change_the_run(stack: LocalStack, receiver: Receiver) -> None:
    receiver.replies["/done"] = Reply(body={"action": "deny"})
    agent_id = agent_with_hooks(stack, receiver, http("OnRunComplete", f"{receiver.url}/done"))

    result = run(stack, agent_id)

    assert result["status"] == "succeeded"
    told = eventually(lambda: receiver.to("/done"), timeout=10, what="the OnRunComplete hook's request")
    assert told[0].json()["event"] == "OnRunComplete"


@pytest.mark.parametrize(("fail_closed", "called"), [(False, 1), (True, 0)])
def test_an_unreachable_http_hook_fails_open_unless_told_to_fail_closed(
    stack: LocalStack, receiver: Receiver, fail_closed: bool, called: int
) -> None:
    agent_id = agent_with_hooks(
        stack,
        receiver,
        http("PreToolUse", "http://127.0.0.1:9/hook", timeout_seconds=1, fail_closed=fail_closed),
    )

    result = run(stack, agent_id)

    assert result["status"] == "succeeded"
    assert len(receiver.to("/send")) == called


def test_an_approval_hook_mails_and_posts_its_channels(
    stack: LocalStack, receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    channels = [
        {"type": "email", "to": ["ops@example.com"]},
        {"type": "slack", "webhook_url": "https://hooks.slack.example/unreachable"},  # fails: logged only
    ]
    hook = {"event": "PreToolUse", "type": "approval", "config": {"channels": channels}}
    agent_id = agent_with_hooks(stack, receiver)
    status, _, body = stack.invoke_api("POST", f"/v1/agents/{agent_id}/hooks", hook)
    assert status == 201, body
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go", "script": CALL}
    )
    requested = eventually(
        lambda: events_of(stack, accepted["run_id"], "approval_requested"), timeout=30, what="the approval"
    )

    # The Await step tells the humans after it emits the event (and marks the run waiting): wait for it.
    printed = ""

    def mailed() -> bool:
        nonlocal printed
        printed += capsys.readouterr().out
        assert "ops@example.com" in printed and requested[0]["approval_url"] in printed, printed
        return True

    eventually(mailed, timeout=30, what="the approval's mail")
    stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/approve", {"approved": True})
    assert wait_for_run(stack, accepted["run_id"])["status"] == "succeeded"


def slack_request(
    stack: LocalStack, secret: str, payload: dict[str, Any], *, age: int = 0, sign_with: str | None = None
) -> int:
    body = f"payload={quote(json.dumps(payload))}".encode()
    timestamp = str(int(time.time()) - age)
    digest = hmac.new(
        (sign_with or secret).encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256
    ).hexdigest()
    status, _, _ = stack.invoke_api(
        "POST",
        "/v1/integrations/slack/interactions",
        raw=body,
        key=None,
        headers={
            "content-type": "application/x-www-form-urlencoded",
            "x-slack-request-timestamp": timestamp,
            "x-slack-signature": f"v0={digest}",
        },
    )
    return status


def test_a_slack_click_is_verified_then_decides(
    stack: LocalStack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "slack-secret")
    _, _, agent = stack.invoke_api(
        "POST",
        "/v1/agents",
        {"name": "slack", "tools": [tool("send", f"{receiver.url}/send", permission="ask")]},
    )
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go", "script": CALL}
    )
    requested = eventually(
        lambda: events_of(stack, accepted["run_id"], "approval_requested"), timeout=30, what="the approval"
    )
    token = urlparse(requested[0]["approval_url"]).path.rsplit("/", 1)[-1]
    payload = {
        "type": "block_actions",
        "user": {"id": "U123", "username": "ops"},
        "actions": [{"action_id": "stepwise_approve", "value": token, "type": "button"}],
    }

    assert slack_request(stack, "slack-secret", payload, sign_with="wrong") == 401
    assert slack_request(stack, "slack-secret", payload, age=600) == 401
    assert receiver.to("/send") == []
    assert slack_request(stack, "slack-secret", payload) == 200

    assert wait_for_run(stack, accepted["run_id"])["status"] == "succeeded"
    assert len(receiver.to("/send")) == 1
    decided = events_of(stack, accepted["run_id"], "approval_decided")
    assert decided[0]["approved"] is True and decided[0]["decided_by"] == "slack:U123"
