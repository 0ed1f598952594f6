"""Every guarded outbound client against a hostile peer on loopback: a stacked-gzip bomb, a plain gzip
bomb and a peer trickling its headers. Each must end with its own error (or a bounded answer), with the
peak memory of the whole call bounded and the exchange's deadline honoured whatever the per-read timeout.

The trickling peer's answer would be a valid 200 after several seconds; with a 1-second deadline the
outcome must be the client's timeout, and the peer must see the client hang up before it finished (a
client that checked its deadline only after the headers would time out too, but only once the peer was
done): the tests assert outcomes, not durations.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from stepwise.approvals.channels import ChannelError
from stepwise.approvals.channels.slack import post_webhook
from stepwise.hooks import Hook, call_http_hook
from stepwise.hooks.http import HOOK_REPLY_LIMIT
from stepwise.mcp import client as mcp_client
from stepwise.mcp.models import McpServer
from stepwise.net.outbound import RESPONSE_LIMIT
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import StaticSettings, http_request, web_scrape
from stepwise.tools.builtin._provider import PROVIDER_RESPONSE_BYTES, post_json
from stepwise.tools.http_tool import TRUNCATION_MARKER, call_http_tool
from stepwise.tools.models import HttpTool
from tests.fakes.hostile import (
    BOMB_BYTES,
    TRICKLE_BYTES,
    TRICKLE_GAP,
    HostilePeer,
    gzip_bomb,
    stacked_bomb,
)

LOOPBACK = "127.0.0.1"
DEADLINE = 1.0
# Well above the largest limit a client reads up to (8 MiB, held twice while joined), far below the bomb.
PEAK_LIMIT = 40 * 1024 * 1024
assert PEAK_LIMIT < BOMB_BYTES // 4


@dataclass
class Outcome:
    code: str  # the tool result's error code, "ok", or what a hook or a channel did
    message: str
    output: Any = None


def _result(result: ToolResult) -> Outcome:
    if result.ok:
        return Outcome("ok", "", result.output)
    assert result.error is not None
    return Outcome(result.error.code, result.error.message)


def via_http_request(url: str, timeout: float) -> Outcome:
    return _result(
        http_request.send(
            http_request.Arguments(method="GET", url=url),
            config=http_request.Config(),
            timeout=timeout,
            allow_hosts=LOOPBACK,
        )
    )


def via_custom_tool(url: str, timeout: float) -> Outcome:
    tool = HttpTool(
        type="http", name="probe", description="probe", input_schema={"type": "object"}, endpoint=url
    )
    return _result(call_http_tool(tool, {}, timeout=timeout, allow_hosts=LOOPBACK))


def via_hook(url: str, timeout: float) -> Outcome:
    hook = Hook.model_validate(
        {
            "event": "PreToolUse",
            "type": "http",
            "config": {"url": url, "timeout_seconds": timeout, "fail_closed": True},
            "hook_id": "hk_1",
            "created_at": datetime(2026, 1, 1, tzinfo=UTC),
        }
    )
    decision = call_http_hook(hook, event="PreToolUse", tool_name="t", data={}, allow_hosts=LOOPBACK)
    return Outcome(f"hook_{decision.action}", decision.message or "")


def via_provider(url: str, timeout: float) -> Outcome:
    return _result(
        post_json(url, {"q": 1}, provider="Exa", headers={}, timeout=timeout, allow_hosts=LOOPBACK)
    )


def via_web_scrape(url: str, timeout: float) -> Outcome:
    # The Firecrawl call is the outbound one; the page itself is only checked.
    with _env(web_scrape.BASE_URL_ENV, url):
        return _result(
            web_scrape.scrape(
                web_scrape.Arguments(url="https://example.com/"),
                settings=StaticSettings({web_scrape.API_KEY_SETTING: "fc-key"}),
                timeout=timeout,
                allow_hosts=LOOPBACK,
            )
        )


def _mcp_server(url: str) -> McpServer:
    return McpServer(name="hostile", url=url, created_at=datetime(2026, 1, 1, tzinfo=UTC))


def via_mcp_discovery(url: str, timeout: float) -> Outcome:
    try:
        mcp_client.discover(_mcp_server(url), timeout=timeout, allow_hosts=LOOPBACK)
    except mcp_client.McpFailure as exc:
        return Outcome(exc.code, exc.message)
    return Outcome("ok", "")


def via_mcp_call(url: str, timeout: float) -> Outcome:
    return _result(mcp_client.call_tool(_mcp_server(url), "probe", {}, timeout=timeout, allow_hosts=LOOPBACK))


def via_slack(url: str, timeout: float) -> Outcome:
    try:
        with _env("STEPWISE_ALLOW_HOSTS", LOOPBACK):  # post_webhook reads the allow list from there
            post_webhook(url, {"text": "hi"}, timeout=timeout)
    except ChannelError as exc:
        return Outcome("channel_error", str(exc))
    return Outcome("ok", "")


@contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(name, value)
        yield


Client = Callable[[str, float], Outcome]
CLIENTS: dict[str, Client] = {
    "http_request": via_http_request,
    "custom_tool": via_custom_tool,
    "http_hook": via_hook,
    "provider": via_provider,
    "web_scrape": via_web_scrape,
    "mcp_discovery": via_mcp_discovery,
    "mcp_call": via_mcp_call,
    "slack": via_slack,
}


@pytest.fixture(scope="module")
def peer() -> Iterator[HostilePeer]:
    gzip_bomb(), stacked_bomb()  # built before any test traces memory
    hostile = HostilePeer()
    yield hostile
    hostile.close()


def measured(client: Client, url: str, timeout: float) -> tuple[Outcome, int]:
    tracemalloc.start()
    try:
        outcome = client(url, timeout)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return outcome, peak


@pytest.mark.parametrize("name", list(CLIENTS))
def test_stacked_encodings_are_refused(peer: HostilePeer, name: str) -> None:
    outcome, peak = measured(CLIENTS[name], peer.url("/stacked/x"), 10)

    assert "stacks content-codings (gzip, gzip)" in outcome.message
    expected = {"http_hook": "hook_deny", "slack": "channel_error"}.get(name, "unsupported_encoding")
    assert outcome.code == expected
    assert peak < PEAK_LIMIT


# What each client makes of a body that decodes to 256 MiB: the tools that keep a prefix keep it, the
# others stop at their limit with their own error.
BOMB_OUTCOMES = {
    "http_request": ("ok", ""),
    "custom_tool": ("ok", ""),
    "http_hook": ("hook_deny", f"over {HOOK_REPLY_LIMIT} bytes"),
    "provider": ("provider_error", f"more than {PROVIDER_RESPONSE_BYTES} bytes"),
    "web_scrape": ("provider_error", f"more than {PROVIDER_RESPONSE_BYTES} bytes"),
    "mcp_discovery": ("response_too_large", f"more than {RESPONSE_LIMIT:,} bytes"),
    "mcp_call": ("response_too_large", f"more than {RESPONSE_LIMIT:,} bytes"),
    "slack": ("channel_error", f"more than {64 * 1024:,} bytes"),
}
assert BOMB_OUTCOMES.keys() == CLIENTS.keys()


@pytest.mark.parametrize("name", list(CLIENTS))
def test_a_gzip_bomb_is_read_within_bounded_memory(peer: HostilePeer, name: str) -> None:
    outcome, peak = measured(CLIENTS[name], peer.url("/gzip/x"), 10)

    code, message = BOMB_OUTCOMES[name]
    assert outcome.code == code
    assert message in outcome.message
    if code == "ok":  # the prefix of zeros the model is shown, with the cut marked
        text = outcome.output["body"] if name == "http_request" else outcome.output
        assert text.startswith("\0" * 100) and text.endswith(TRUNCATION_MARKER)
    assert peak < PEAK_LIMIT


TRICKLE_OUTCOMES = {
    "http_request": ("timeout", ""),
    "custom_tool": ("timeout", ""),
    "http_hook": ("hook_deny", f"no reply within {DEADLINE:g} seconds"),
    "provider": ("timeout", f"did not answer within {DEADLINE:g} seconds"),
    "web_scrape": ("timeout", f"did not answer within {DEADLINE:g} seconds"),
    "mcp_discovery": ("mcp_unavailable", f"did not answer within {DEADLINE:g} s"),
    "mcp_call": ("mcp_unavailable", f"did not answer within {DEADLINE:g} s"),
    "slack": ("channel_error", "Timeout"),
}
assert TRICKLE_OUTCOMES.keys() == CLIENTS.keys()


@pytest.mark.parametrize("name", list(CLIENTS))
def test_a_peer_trickling_headers_meets_the_deadline(peer: HostilePeer, name: str) -> None:
    while not peer.trickles.empty():  # what earlier tests' connections reported late
        peer.trickles.get()

    outcome = CLIENTS[name](peer.url("/trickle/x"), DEADLINE)

    code, message = TRICKLE_OUTCOMES[name]
    assert outcome.code == code
    assert message in outcome.message
    assert peer.trickles.get(timeout=TRICKLE_BYTES * TRICKLE_GAP + 5) == "hung_up"
