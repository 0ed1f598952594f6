"""MCP servers without a network: naming, declarations, lookup, validation, the guard and result text."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from stepwise.agents.mcp_servers import _within_limit, check_destination
from stepwise.agents.models import Agent
from stepwise.core.errors import Unprocessable
from stepwise.core.masking import MASK
from stepwise.loop.gating import permission_for
from stepwise.mcp import declarations, find
from stepwise.mcp.models import TOOLS_CACHE_LIMIT, McpServer, McpServerCreate, McpTool
from stepwise.mcp.naming import NAME_LIMIT, exposed_name, exposed_names
from stepwise.mcp.transport import GuardedAsyncBackend
from stepwise.net.ssrf import BlockedDestination
from stepwise.tools.models import TOOL_NAME

CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def tool(name: str, **annotations: Any) -> McpTool:
    schema = {"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}}}
    return McpTool(name=name, description=f"{name} tool", input_schema=schema, annotations=annotations)


def server(name: str, *tools: McpTool, **fields: Any) -> McpServer:
    fields = {"discovered_at": CREATED, **fields}
    return McpServer(
        name=name,
        url=f"https://{name}.example.com/mcp",
        headers={"Authorization": "Bearer secret"},
        created_at=CREATED,
        tools=list(tools),
        **fields,
    )


def agent(*servers: McpServer, default: str = "allow") -> Agent:
    return Agent(
        name="a",
        agent_id="agt_1",
        created_at=CREATED,
        updated_at=CREATED,
        permissions={"default": default},
        mcp_servers=[s.model_dump(mode="json") for s in servers],
    )


# --- Names ------------------------------------------------------------------------------------------


def test_a_plain_tool_name_is_namespaced_as_it_is() -> None:
    assert exposed_name("github", "create_issue") == "mcp__github__create_issue"


@pytest.mark.parametrize("raw", ["search.docs", "files/read", "lookup ü", "a" * 200, "x:" * 50, ""])
def test_any_tool_name_becomes_a_valid_function_name(raw: str) -> None:
    # Given the longest server name allowed
    name = exposed_name("s" * 32, raw)

    # Then what the model sees is one every provider accepts, and always the same
    assert re.fullmatch(TOOL_NAME, name) and len(name) <= NAME_LIMIT
    assert name.startswith("mcp__" + "s" * 32 + "__")
    assert name == exposed_name("s" * 32, raw)


def test_names_that_collide_after_cleaning_are_told_apart() -> None:
    names = exposed_names("srv", ["a_b", "a.b", "a:b"])

    assert names["a_b"] == "mcp__srv__a_b"  # the one that needed no cleaning keeps its name
    assert len(set(names.values())) == 3
    assert all(re.fullmatch(TOOL_NAME, n) for n in names.values())


def test_long_names_with_a_common_prefix_stay_distinct() -> None:
    names = exposed_names("srv", ["x" * 80 + "1", "x" * 80 + "2"])
    assert len(set(names.values())) == 2 and all(len(n) <= NAME_LIMIT for n in names.values())


@pytest.mark.parametrize("name", ["a__b", "tools_", "UPPER", "x" * 33, "dot.ted", ""])
def test_server_names_that_could_make_names_ambiguous_are_refused(name: str) -> None:
    with pytest.raises(ValidationError):
        McpServerCreate(name=name, url="https://mcp.example.com/mcp")


# --- Registration bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"name": "local", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem"]},
        {"name": "local", "url": "https://x.example.com/mcp", "transport": "stdio"},
        {"name": "local", "url": "stdio://server-filesystem"},
    ],
)
def test_stdio_servers_are_refused_with_a_clear_message(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        McpServerCreate.model_validate(body)
    assert "stdio" in str(caught.value)


@pytest.mark.parametrize("url", ["ws://x.example.com/mcp", "file:///etc/passwd", "x.example.com/mcp"])
def test_only_http_urls_are_taken(url: str) -> None:
    with pytest.raises(ValidationError, match="http"):
        McpServerCreate(name="s", url=url)


@pytest.mark.parametrize(
    "headers",
    [{"Mcp-Session-Id": "x"}, {"Host": "internal"}, {"X-Token": "a\r\nX-Injected: 1"}, {"bad name": "v"}],
)
def test_headers_the_transport_owns_or_that_could_smuggle_are_refused(headers: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        McpServerCreate(name="s", url="https://x.example.com/mcp", headers=headers)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/mcp",
        "http://127.0.0.1:9001/mcp",
        "http://[fd00:ec2::254]/mcp",
        "http://metadata.google.internal/mcp",
        "http://user:pw@example.com/mcp",
    ],
)
def test_urls_the_ssrf_guard_refuses_are_a_422_at_registration(url: str) -> None:
    with pytest.raises(Unprocessable) as caught:
        check_destination(url, allow_hosts=[])
    assert caught.value.code == "blocked_destination"


def test_the_guarded_backend_refuses_an_internal_answer_before_any_socket() -> None:
    backend = GuardedAsyncBackend([], resolver=lambda host, port: ["10.1.2.3"])

    async def connect() -> None:
        await backend.connect_tcp("rebinding.example.com", 443)

    with pytest.raises(BlockedDestination):
        anyio.run(connect)


# --- What a run sees ----------------------------------------------------------------------------------


def test_declarations_are_sorted_and_byte_stable_whatever_the_stored_order() -> None:
    # Given the same servers and tools stored in two different orders
    one = agent(server("zeta", tool("b"), tool("a")), server("alpha", tool("search.docs")))
    two = agent(server("alpha", tool("search.docs")), server("zeta", tool("a"), tool("b")))

    # Then the declarations are the same bytes, sorted by name
    first = json.dumps(declarations(one))
    assert first == json.dumps(declarations(two))
    names = [d["function"]["name"] for d in declarations(one)]
    assert names == ["mcp__alpha__search_docs", "mcp__zeta__a", "mcp__zeta__b"]
    # And each schema's keys are sorted too
    assert list(declarations(one)[0]["function"]["parameters"]) == ["properties", "required", "type"]


def test_disabled_servers_and_servers_without_tools_declare_nothing() -> None:
    down = server("down", last_error="MCP server down answered HTTP 401")
    off = server("off", tool("t"), enabled=False)
    subject = agent(down, off, server("on", tool("t")))

    assert [d["function"]["name"] for d in declarations(subject)] == ["mcp__on__t"]
    assert find(subject, "mcp__off__t") is None


def test_a_trusted_servers_hints_decide_with_the_specs_defaults() -> None:
    tools = (
        tool("lookup", readOnlyHint=True),
        tool("drop", destructiveHint=True),
        tool("append", destructiveHint=False),
        tool("plain"),
    )
    subject = agent(server("srv", *tools, trusted=True))

    lookup = find(subject, "mcp__srv__lookup")
    assert lookup is not None and lookup.tool.name == "lookup" and lookup.server.name == "srv"
    assert lookup.read_only and lookup.parallel_safe and lookup.effect == "none"
    assert lookup.permission == "inherit"

    drop = find(subject, "mcp__srv__drop")
    assert drop is not None and drop.destructive and not drop.parallel_safe and drop.permission == "ask"

    append = find(subject, "mcp__srv__append")
    assert append is not None and not append.destructive and append.permission == "inherit"
    assert append.effect == "undeclared"

    # No destructiveHint is the spec's default: destructive.
    plain = find(subject, "mcp__srv__plain")
    assert plain is not None and plain.destructive and not plain.parallel_safe and plain.permission == "ask"
    assert find(subject, "mcp__srv__missing") is None and find(subject, "lookup") is None


@pytest.mark.parametrize("default", ["allow", "allow_reads"])
def test_an_untrusted_servers_hints_never_take_caution_away(default: str) -> None:
    subject = agent(
        server("srv", tool("lookup", readOnlyHint=True), tool("append", destructiveHint=False)),
        default=default,
    )

    for name in ("mcp__srv__lookup", "mcp__srv__append"):
        ref = find(subject, name)
        assert ref is not None
        # Not read-only: not parallel-safe, not effect-free (the ledger runs it once), not allowed
        # under allow_reads; and destructive whatever it says, so a human is asked first.
        assert not ref.read_only and not ref.parallel_safe and ref.effect == "undeclared"
        assert ref.destructive and ref.permission == "ask"
        assert permission_for(subject, ref) == "ask"


def test_an_untrusted_servers_tools_follow_an_explicit_server_permission() -> None:
    subject = agent(server("srv", tool("lookup", readOnlyHint=True), permission="allow"))

    ref = find(subject, "mcp__srv__lookup")
    assert ref is not None and ref.permission == "allow" and ref.effect == "undeclared"


def test_trusted_is_shown_and_defaults_to_false() -> None:
    created = McpServerCreate(name="srv", url="https://srv.example.com/mcp")
    assert created.trusted is False
    assert server("srv", trusted=True).view().model_dump(mode="json")["trusted"] is True


def test_find_resolves_a_cleaned_name_to_the_servers_own_name() -> None:
    ref = find(agent(server("srv", tool("search.docs"))), "mcp__srv__search_docs")
    assert ref is not None and ref.tool.name == "search.docs"


def test_a_destructive_tool_is_denied_when_the_agent_denies_and_the_server_setting_wins() -> None:
    destructive = tool("drop", destructiveHint=True)
    denied = find(agent(server("srv", destructive, trusted=True), default="deny"), "mcp__srv__drop")
    assert denied is not None and denied.permission == "deny"

    allowed = find(agent(server("srv", destructive, permission="allow")), "mcp__srv__drop")
    assert allowed is not None and allowed.permission == "allow"


# --- Stored entries ------------------------------------------------------------------------------------


def test_the_view_masks_header_values_and_names_each_tool() -> None:
    view = server("srv", tool("search.docs")).view().model_dump(mode="json")

    assert view["headers"] == {"Authorization": MASK}
    assert "secret" not in json.dumps(view)
    assert view["tools"][0]["exposed_name"] == "mcp__srv__search_docs"


def test_staleness() -> None:
    now = CREATED + timedelta(hours=25)
    assert server("s").stale(now=now)
    assert not server("s").stale(now=CREATED + timedelta(hours=1))
    assert server("s", discovered_at=None).stale(now=CREATED)


def test_the_cache_keeps_what_fits_and_says_what_it_dropped() -> None:
    big = [McpTool(name=f"t{i}", description="d" * 3000) for i in range(20)]

    kept, error = _within_limit([*big, big[0]])

    assert 0 < len(kept) < 20
    assert len(json.dumps([t.model_dump(mode="json") for t in kept])) <= TOOLS_CACHE_LIMIT
    assert error is not None and f"only {len(kept)} of the server's 20 tools" in error
    assert _within_limit(big[:2]) == (big[:2], None)


# --- Results ------------------------------------------------------------------------------------------


def test_content_blocks_become_text_with_placeholders() -> None:
    import mcp_types

    from stepwise.mcp.client import content_text

    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(text="first"),
            mcp_types.ImageContent(data="aGVsbG8h", mime_type="image/png"),
            mcp_types.EmbeddedResource(
                resource=mcp_types.TextResourceContents(uri="file:///a.txt", text="embedded")
            ),
        ]
    )
    assert content_text(result) == "first\n[image: image/png, 6 bytes]\nembedded"
    structured = mcp_types.CallToolResult(content=[], structured_content={"b": 1, "a": 2})
    assert content_text(structured) == '{"a": 2, "b": 1}'


def test_the_api_and_a_runs_tool_set_never_import_the_sdk() -> None:
    probe = (
        "import sys, stepwise.api.app, stepwise.mcp, stepwise.agents.mcp_servers; "
        "print('mcp' in sys.modules, 'uvicorn' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["False", "False"]


def test_a_slow_name_server_does_not_outlive_the_operations_deadline() -> None:
    release = threading.Event()
    answered: list[str] = []

    def slow_resolver(host: str, port: int) -> list[str]:
        release.wait(10)
        answered.append(host)
        return ["93.184.216.34"]

    async def connect() -> None:
        with anyio.fail_after(0.2):
            await GuardedAsyncBackend([], resolver=slow_resolver).connect_tcp("slow.example", 443)

    with pytest.raises(TimeoutError):
        anyio.run(connect)
    # The deadline ended the wait while the resolver was still blocked, not after it answered.
    assert answered == []
    release.set()


# --- Allowlists and per-tool permissions (issue 27) ----------------------------------------------

SRV = {"name": "srv", "url": "https://srv.example.com/mcp"}
EXPOSED = ("mcp__srv__delete", "mcp__srv__lookup", "mcp__srv__search")


@pytest.mark.parametrize(
    ("tools", "declared"),
    [
        (None, ["mcp__srv__delete", "mcp__srv__lookup", "mcp__srv__search"]),
        ({"allow": ["lookup", "renamed"]}, ["mcp__srv__lookup"]),
        ({"deny": ["delete"]}, ["mcp__srv__lookup", "mcp__srv__search"]),
        ({"allow": ["lookup", "delete"], "deny": ["delete"]}, ["mcp__srv__lookup"]),
        ({"allow": []}, []),
    ],
)
def test_only_the_tools_the_filter_admits_are_declared_and_found(
    tools: dict[str, Any] | None, declared: list[str]
) -> None:
    spec = McpServerCreate.model_validate(
        {"name": "srv", "url": "https://srv.example.com/mcp", "tools": tools}
    )
    subject = agent(server("srv", tool("lookup"), tool("search"), tool("delete"), tool_filter=spec.tools))

    assert [d["function"]["name"] for d in declarations(subject)] == declared
    assert [
        n for n in ("mcp__srv__delete", "mcp__srv__lookup", "mcp__srv__search") if find(subject, n)
    ] == declared
    shown = servers_view(subject)
    assert sorted(t["name"] for t in shown["tools"] if t["declared"]) == [n.split("__")[-1] for n in declared]
    assert shown["missing_tools"] == (["renamed"] if tools == {"allow": ["lookup", "renamed"]} else [])


def servers_view(subject: Agent) -> dict[str, Any]:
    (shown,) = [McpServer.model_validate(s).view().model_dump(mode="json") for s in subject.mcp_servers]
    return shown


# (server permissions, server permission, agent default, annotations, trusted) → the decision. The
# rules in order: the tool's own permission on its server, the server's permission, ask for a
# destructive tool (deny when the agent denies by default), then the agent's default (allow_reads
# allows a trusted read-only tool, asks for the rest).
RULES = [
    ({"t": "deny"}, "allow", "allow", {"readOnlyHint": True}, True, "deny"),  # 1 beats 2
    ({"t": "allow"}, "deny", "deny", {}, False, "allow"),  # 1 beats 2, 3 and 4
    ({"t": "ask"}, "inherit", "allow", {"readOnlyHint": True}, True, "ask"),  # 1 beats 4
    ({"other": "deny"}, "allow", "deny", {}, False, "allow"),  # another tool's rule: 2 applies
    ({}, "deny", "allow", {"readOnlyHint": True}, True, "deny"),  # 2 beats 4
    ({}, "allow", "allow", {}, False, "allow"),  # 2 beats 3
    ({}, "inherit", "allow", {}, False, "ask"),  # 3: untrusted, so destructive
    ({}, "inherit", "deny", {}, False, "deny"),  # 3 with a denying agent
    ({}, "inherit", "allow_reads", {"readOnlyHint": True}, True, "allow"),  # 4: a trusted read
    ({}, "inherit", "allow_reads", {"readOnlyHint": False, "destructiveHint": False}, True, "ask"),  # 4
    ({}, "inherit", "allow", {"readOnlyHint": False, "destructiveHint": False}, True, "allow"),  # 4
]


@pytest.mark.parametrize(("permissions", "permission", "default", "hints", "trusted", "decision"), RULES)
def test_permission_rules_apply_in_order(
    permissions: dict[str, str],
    permission: str,
    default: str,
    hints: dict[str, Any],
    trusted: bool,
    decision: str,
) -> None:
    spec = {"permissions": permissions, "permission": permission, "trusted": trusted}
    subject = agent(server("srv", tool("t", **hints), **spec), default=default)

    ref = find(subject, "mcp__srv__t")

    assert ref is not None and permission_for(subject, ref) == decision


def test_per_tool_permissions_take_only_allow_ask_or_deny() -> None:
    with pytest.raises(ValidationError):
        McpServerCreate.model_validate(
            {"name": "srv", "url": "https://srv.example.com/mcp", "permissions": {"t": "inherit"}}
        )
