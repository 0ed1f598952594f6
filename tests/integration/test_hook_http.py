"""HTTP hooks against a real webhook on loopback: the request, the reply, and every way it can fail."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stepwise.hooks import ApprovalConfig, Hook, HookDecision, call_http_hook, evaluate
from stepwise.hooks.http import HOOK_PAYLOAD_LIMIT, HOOK_REPLY_LIMIT, HOOK_STRING_LIMIT

Respond = Callable[[BaseHTTPRequestHandler], None]


def reply(status: int = 200, body: bytes | str = b"{}") -> Respond:
    data = body.encode() if isinstance(body, str) else body

    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return respond


def reply_json(value: Any, status: int = 200) -> Respond:
    return reply(status, json.dumps(value))


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Webhook:
    """A webhook receiver: records each request and answers with `respond`, which tests script."""

    url: str
    requests: list[Received] = field(default_factory=list)
    respond: Respond = field(default_factory=lambda: reply_json({}))
    release: threading.Event = field(default_factory=threading.Event)  # lets a stalled handler finish

    def stall(self, handler: BaseHTTPRequestHandler) -> None:
        """Answer only when the test is over: longer than any hook's timeout."""
        self.release.wait(timeout=30)
        reply_json({"action": "deny"})(handler)


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    peer: Webhook

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            peer.requests.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            peer.respond(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that gave up on a stalled reply is not an error here

    server = Server(("127.0.0.1", 0), Handler)
    peer = Webhook(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield peer
    finally:
        peer.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPWISE_ALLOW_HOSTS", "127.0.0.1")


def http_hook(url: str, *, event: str = "PreToolUse", hook_id: str = "hk_1", **config: Any) -> Hook:
    return Hook.model_validate(
        {
            "event": event,
            "type": "http",
            "config": {"url": url, **config},
            "hook_id": hook_id,
            "created_at": datetime(2026, 1, 1, tzinfo=UTC),
        }
    )


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


# --- The request ----------------------------------------------------------------------------------


def test_a_tool_event_is_posted_as_json_with_the_configured_headers(webhook: Webhook) -> None:
    hook = http_hook(
        f"{webhook.url}/policy", headers={"Authorization": "Bearer hook-secret", "X-Tenant": "t1"}
    )

    call_http_hook(hook, event="PreToolUse", tool_name="database_query", data={"query": "SELECT ..."})

    [request] = webhook.requests
    assert request.path == "/policy"
    assert request.json() == {
        "event": "PreToolUse",
        "tool_name": "database_query",
        "data": {"query": "SELECT ..."},
    }
    assert request.headers["content-type"] == "application/json"
    assert request.headers["authorization"] == "Bearer hook-secret"
    assert request.headers["x-tenant"] == "t1"
    assert request.headers["user-agent"] == "stepwise/0.1"


def test_output_events_send_the_output(webhook: Webhook) -> None:
    hook = http_hook(webhook.url, event="PostToolUse")

    call_http_hook(hook, event="PostToolUse", tool_name="search", data={"q": "x"}, output={"hits": ["é"]})

    assert webhook.requests[0].json() == {
        "event": "PostToolUse",
        "tool_name": "search",
        "data": {"q": "x"},
        "output": {"hits": ["é"]},
    }


def test_events_without_a_tool_send_an_empty_tool_name(webhook: Webhook) -> None:
    hook = http_hook(webhook.url, event="OnRunStart")

    call_http_hook(hook, event="OnRunStart", tool_name=None, data={"message": "hi"})

    assert webhook.requests[0].json() == {"event": "OnRunStart", "tool_name": "", "data": {"message": "hi"}}


# --- The reply ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, HookDecision(action="allow", hook_id="hk_1")),
        ({"action": "allow", "extra": "ignored"}, HookDecision(action="allow", hook_id="hk_1")),
        ({"action": "deny", "message": "no"}, HookDecision(action="deny", message="no", hook_id="hk_1")),
        (
            {"action": "ask"},
            HookDecision(action="ask", hook_id="hk_1", approval=ApprovalConfig()),
        ),
        (
            {"modified_input": {"query": "SELECT ... LIMIT 100"}},
            HookDecision(modified_input={"query": "SELECT ... LIMIT 100"}, hook_id="hk_1"),
        ),
        ({"modified_output": "redacted"}, HookDecision(modified_output="redacted", hook_id="hk_1")),
    ],
)
def test_the_reply_becomes_the_decision(
    webhook: Webhook, body: dict[str, Any], expected: HookDecision
) -> None:
    webhook.respond = reply_json(body)

    decision = call_http_hook(http_hook(webhook.url), event="PreToolUse", tool_name="t", data={})

    assert decision == expected


def test_modified_input_reaches_the_next_hook_through_the_engine(webhook: Webhook) -> None:
    def respond(handler: BaseHTTPRequestHandler) -> None:
        sent = webhook.requests[-1].json()["data"]
        reply_json({"modified_input": {**sent, "limit": sent.get("limit", 0) + 1}})(handler)

    webhook.respond = respond
    hooks = [http_hook(webhook.url, hook_id="hk_1"), http_hook(webhook.url, hook_id="hk_2")]

    decision = evaluate(hooks, event="PreToolUse", tool_name="db", arguments={"query": "SELECT 1"})

    assert [request.json()["data"] for request in webhook.requests] == [
        {"query": "SELECT 1"},
        {"query": "SELECT 1", "limit": 1},
    ]
    assert decision == HookDecision(action="allow", modified_input={"query": "SELECT 1", "limit": 2})


# --- Failures: open by default, closed on request -------------------------------------------------


def expect_failure(decision: HookDecision, *, fail_closed: bool, reason: str) -> None:
    assert decision.hook_id == "hk_1"
    assert decision.message is not None and reason in decision.message
    if fail_closed:
        assert decision.action == "deny"
        assert decision.message.startswith("hook unavailable: ")
        assert decision.warnings == []
    else:
        assert decision.action == "allow"
        assert decision.warnings == [decision.message]
        assert "failed open" in decision.message


@pytest.mark.parametrize("fail_closed", [False, True])
def test_a_webhook_slower_than_its_timeout(webhook: Webhook, fail_closed: bool) -> None:
    webhook.respond = webhook.stall
    hook = http_hook(webhook.url, timeout_seconds=1, fail_closed=fail_closed)

    started = time.monotonic()
    decision = call_http_hook(hook, event="PreToolUse", tool_name="t", data={})

    assert time.monotonic() - started < 10  # it gave up rather than waiting for the stalled reply
    expect_failure(decision, fail_closed=fail_closed, reason="no reply within 1 seconds")
    assert len(webhook.requests) == 1


@pytest.mark.parametrize("fail_closed", [False, True])
def test_an_unreachable_webhook(fail_closed: bool) -> None:
    hook = http_hook(closed_port_url(), fail_closed=fail_closed)

    decision = call_http_hook(hook, event="PreToolUse", tool_name="t", data={})

    expect_failure(decision, fail_closed=fail_closed, reason="could not reach")


@pytest.mark.parametrize("fail_closed", [False, True])
@pytest.mark.parametrize("status", [500, 404, 302])
def test_a_non_2xx_status(webhook: Webhook, fail_closed: bool, status: int) -> None:
    # Even a deny in the body of an error status is not a decision: the contract is a 2xx reply.
    webhook.respond = reply_json({"action": "deny"}, status=status)

    decision = call_http_hook(
        http_hook(webhook.url, fail_closed=fail_closed), event="PreToolUse", tool_name="t", data={}
    )

    expect_failure(decision, fail_closed=fail_closed, reason=f"HTTP {status}")


@pytest.mark.parametrize("fail_closed", [False, True])
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "invalid reply: Invalid JSON"),
        (b"", "invalid reply: Invalid JSON"),
        (b'["deny"]', "invalid reply"),
        (b'{"action": "block"}', "invalid reply: action"),
        (b'{"modified_input": "SELECT 1"}', "invalid reply: modified_input"),
    ],
)
def test_a_reply_that_is_not_the_contracts_json(
    webhook: Webhook, fail_closed: bool, body: bytes, reason: str
) -> None:
    webhook.respond = reply(200, body)

    decision = call_http_hook(
        http_hook(webhook.url, fail_closed=fail_closed), event="PreToolUse", tool_name="t", data={}
    )

    expect_failure(decision, fail_closed=fail_closed, reason=reason)


def test_an_oversized_reply_is_a_failure(webhook: Webhook) -> None:
    webhook.respond = reply_json({"modified_output": "x" * HOOK_REPLY_LIMIT})

    decision = call_http_hook(
        http_hook(webhook.url, event="PostToolUse"), event="PostToolUse", tool_name="t", data={}
    )

    expect_failure(decision, fail_closed=False, reason=f"over {HOOK_REPLY_LIMIT} bytes")


@pytest.mark.parametrize("fail_closed", [False, True])
def test_a_destination_the_ssrf_guard_blocks_is_never_contacted(
    webhook: Webhook, monkeypatch: pytest.MonkeyPatch, fail_closed: bool
) -> None:
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS")
    hook = http_hook(webhook.url, fail_closed=fail_closed)

    from_env = call_http_hook(hook, event="PreToolUse", tool_name="t", data={})
    explicit = call_http_hook(hook, event="PreToolUse", tool_name="t", data={}, allow_hosts=[])

    for decision in (from_env, explicit):
        expect_failure(decision, fail_closed=fail_closed, reason="is not allowed")
    assert webhook.requests == []


def test_the_metadata_service_is_blocked() -> None:
    hook = http_hook("http://169.254.169.254/latest/meta-data/", fail_closed=True)

    decision = call_http_hook(hook, event="PreToolUse", tool_name="t", data={})

    expect_failure(decision, fail_closed=True, reason="not allowed")


def test_the_engine_denies_with_a_fail_closed_hook_that_is_down_and_skips_one_that_fails_open() -> None:
    url = closed_port_url()
    open_hook = http_hook(url, hook_id="hk_open", fail_closed=False)
    closed_hook = http_hook(url, hook_id="hk_closed", fail_closed=True)

    skipped = evaluate([open_hook], event="PreToolUse", tool_name="t", arguments={})
    blocked = evaluate([open_hook, closed_hook], event="PreToolUse", tool_name="t", arguments={})

    assert skipped.action == "allow"
    assert [warning.split(":")[0] for warning in skipped.warnings] == ["http hook hk_open failed open"]
    assert (blocked.action, blocked.hook_id) == ("deny", "hk_closed")
    assert blocked.message is not None and blocked.message.startswith("hook unavailable: could not reach")


# --- Failing in the safe direction ----------------------------------------------------------------


@pytest.mark.parametrize("event", ["PreToolUse", "OnDelegation"])
def test_a_gate_that_cannot_answer_denies_by_default(webhook: Webhook, event: str) -> None:
    # The review's case: a webhook that answers an error status for bodies it finds too large.
    webhook.respond = reply(413, b"{}")

    decision = call_http_hook(http_hook(webhook.url, event=event), event=event, tool_name="t", data={})

    assert decision.action == "deny"
    assert decision.message == "hook unavailable: HTTP 413"


def test_a_gate_told_to_fail_open_still_can(webhook: Webhook) -> None:
    webhook.respond = reply(500, b"{}")

    decision = call_http_hook(
        http_hook(webhook.url, fail_closed=False), event="PreToolUse", tool_name="t", data={}
    )

    assert decision.action == "allow" and decision.warnings


def test_long_strings_are_cut_with_a_marker_and_the_payload_says_so(webhook: Webhook) -> None:
    webhook.respond = reply_json({"action": "allow"})
    padded = "A" * (HOOK_STRING_LIMIT + 5000) + "rm -rf /"
    data = {"command": padded, "nested": {"items": ["short", padded]}, "count": 3}

    decision = call_http_hook(http_hook(webhook.url), event="PreToolUse", tool_name="shell", data=data)

    assert decision.action == "allow"
    sent = webhook.requests[0].json()
    marker = f"\n…[truncated: {len(padded) - HOOK_STRING_LIMIT} of {len(padded)} characters omitted]"
    assert sent["truncated"] is True
    assert sent["data"]["command"] == "A" * HOOK_STRING_LIMIT + marker
    assert sent["data"]["nested"]["items"] == ["short", "A" * HOOK_STRING_LIMIT + marker]
    assert sent["data"]["count"] == 3
    assert len(webhook.requests[0].body) <= HOOK_PAYLOAD_LIMIT


def test_an_event_within_the_limits_is_sent_whole(webhook: Webhook) -> None:
    data = {"command": "x" * HOOK_STRING_LIMIT}

    call_http_hook(http_hook(webhook.url), event="PreToolUse", tool_name="shell", data=data)

    sent = webhook.requests[0].json()
    assert sent["data"] == data and "truncated" not in sent


@pytest.mark.parametrize(("fail_closed", "action"), [(True, "deny"), (False, "allow")])
def test_an_event_too_large_even_after_cutting_is_not_sent(
    webhook: Webhook, fail_closed: bool, action: str
) -> None:
    data = {f"k{i}": "v" * 100 for i in range(HOOK_PAYLOAD_LIMIT // 100)}

    decision = call_http_hook(
        http_hook(webhook.url, fail_closed=fail_closed), event="PreToolUse", tool_name="t", data=data
    )

    assert decision.action == action
    assert decision.message is not None and f"over the {HOOK_PAYLOAD_LIMIT:,} bytes" in decision.message
    assert webhook.requests == []
