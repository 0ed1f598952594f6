"""MCP servers as the API takes them, as an agent's item stores them, and as a run sees their tools.

A server is registered on an agent with a URL and optional headers (streamable HTTP, or `transport: "sse"`
for the older HTTP+SSE transport), or, where the
operator allows it (STEPWISE_ALLOW_STDIO_MCP=true), with a command to spawn (stdio, see
stepwise.mcp.stdio); its tools are discovered then and on refresh, and cached in the server's entry
of the agent item, so a run reads them with its agent and never opens a connection to build its tool
list.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from stepwise.core.masking import is_sealed, mask_headers
from stepwise.core.schema import Strict, Timestamp, utcnow
from stepwise.tools.models import Permission

SERVER_NAME = r"^[a-z0-9_-]{1,32}$"
MCP_TIMEOUT = 30.0  # seconds for a discovery or a tools/call, each as a whole
STALE_AFTER = timedelta(hours=24)  # a cached tool list older than this is refreshed when asked to be
MAX_SERVERS = 10  # per agent: the servers and their cached tools share the agent's 400 KB item
TOOLS_CACHE_LIMIT = 32_000  # bytes of JSON of one server's cached tools
DESCRIPTION_LIMIT = 4096  # characters of a tool description kept

# "sse": the 2024-11-05 HTTP+SSE transport, for servers that have not moved to streamable HTTP.
Transport = Literal["streamable_http", "sse", "stdio"]
_STDIO_FIELDS = ("command", "args", "env")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Header names the MCP transport or HTTP itself owns: a configured value would break the session.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "accept",
        "connection",
        "transfer-encoding",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")  # an RFC 9110 token
_HEADER_VALUE = re.compile(r"^[\x20-\x7e\t]{0,4096}$")  # visible ASCII: no CR/LF, nothing to smuggle


ServerStatus = Literal["ready", "needs_authorization", "failing"]
_SCOPE = r"^[\x21\x23-\x5b\x5d-\x7e]{1,256}$"  # RFC 6749 §3.3 scope-token


class McpOAuth(Strict):
    """`auth: {type: "oauth"}`: the server is behind the MCP authorization flow (OAuth 2.1 with PKCE).

    Without `client_id` Stepwise registers itself with the authorization server (dynamic client
    registration); with one, it uses that pre-registered client (and `client_secret`, for a confidential
    one). `scopes` None asks for what the server advertises. The secret is kept encrypted with the
    server's tokens, never in the agent's item, and no answer shows it.
    """

    type: Literal["oauth"]
    scopes: list[str] | None = Field(default=None, max_length=32)
    client_id: str | None = Field(default=None, min_length=1, max_length=512)
    client_secret: str | None = Field(default=None, min_length=1, max_length=2048)

    @field_validator("scopes")
    @classmethod
    def _scope_tokens(cls, scopes: list[str] | None) -> list[str] | None:
        for scope in scopes or []:
            if not re.match(_SCOPE, scope):
                raise ValueError(f"{scope!r} is not an OAuth scope (no spaces, quotes or backslashes)")
        return scopes

    @model_validator(mode="after")
    def _secret_needs_client(self) -> McpOAuth:
        if self.client_secret is not None and self.client_id is None:
            raise ValueError("auth.client_secret is given only with the auth.client_id it belongs to")
        return self


class McpOAuthView(BaseModel):
    type: Literal["oauth"]
    scopes: list[str] | None
    client_id: str | None  # the tenant's own, when given; a registered one is not shown


ToolPermission = Literal["allow", "ask", "deny"]
MAX_LISTED_TOOLS = 256  # names in an allow or deny list, and tools with their own permission


class McpToolFilter(Strict):
    """`tools: {allow?, deny?}`: which of the server's tools the agent declares, by the names the server
    gives them. With `allow`, only those (an exact allowlist); `deny` takes names away from what is left.
    A server's new tools are not declared while an allowlist is set (they have to be named)."""

    allow: list[str] | None = Field(default=None, max_length=MAX_LISTED_TOOLS)
    deny: list[str] = Field(default_factory=list, max_length=MAX_LISTED_TOOLS)

    @field_validator("allow", "deny")
    @classmethod
    def _names(cls, names: list[str] | None) -> list[str] | None:
        for name in names or []:
            if not 1 <= len(name) <= 256:
                raise ValueError("a tool name has 1 to 256 characters")
        return names

    def admits(self, name: str) -> bool:
        return (self.allow is None or name in self.allow) and name not in self.deny


class McpServerCreate(Strict):
    """`POST /v1/agents/{agent_id}/mcp-servers`: a remote MCP server speaking streamable HTTP at `url`,
    or (`transport: "stdio"`) a process spawned from `command` and `args` with only `env` added to a
    minimal environment. Whether stdio is allowed at all is the operator's call, checked where a server
    is registered and again where one is spawned, not here: a stored server stays readable either way."""

    name: str = Field(pattern=SERVER_NAME)
    transport: Transport = "streamable_http"
    url: str | None = Field(default=None, min_length=1, max_length=2048)
    headers: dict[str, str] = Field(default_factory=dict, max_length=32)
    command: str | None = Field(default=None, min_length=1, max_length=1024)
    args: list[str] = Field(default_factory=list, max_length=64)
    env: dict[str, str] = Field(default_factory=dict, max_length=64)
    enabled: bool = True
    # Applies to every tool of the server; `inherit` lets the tools' annotations and the agent decide.
    permission: Permission = "inherit"
    # One tool's own permission, by the server's name for it: checked before `permission` (Agenta's
    # `policy.permissions.tools[tool_key]`, then the connection's default).
    permissions: dict[str, ToolPermission] = Field(default_factory=dict, max_length=MAX_LISTED_TOOLS)
    # Which tools are declared at all (McpToolFilter); stored as `tool_filter`, since a stored server's
    # `tools` are the ones discovered.
    tools: McpToolFilter | None = None
    # Whether the server's annotations are believed (see McpToolRef). A server is somebody else's code:
    # by default its hints can only add caution, never take it away.
    trusted: bool = False
    auth: McpOAuth | None = None

    @model_validator(mode="after")
    def _one_authorization(self) -> McpServerCreate:
        if self.auth is not None and any(name.lower() == "authorization" for name in self.headers):
            raise ValueError("an OAuth server's Authorization header comes from its tokens: leave it out")
        if self.auth is not None and self.transport == "stdio":
            raise ValueError("auth is for MCP servers reached over HTTP; a stdio server takes env instead")
        return self

    @model_validator(mode="after")
    def _fields_of_the_transport(self) -> McpServerCreate:
        if self.transport == "stdio":
            if self.command is None:
                raise ValueError("a stdio MCP server needs a command")
            if self.url is not None or self.headers:
                raise ValueError("url and headers are for streamable HTTP servers, not stdio ones")
            return self
        if self.url is None:
            raise ValueError("url is required (or transport 'stdio' with a command)")
        extra = [f for f in _STDIO_FIELDS if getattr(self, f)]
        if extra:
            raise ValueError(f"{', '.join(extra)}: only for transport 'stdio'")
        return self

    @field_validator("command", "args")
    @classmethod
    def _no_nul(cls, value: str | list[str] | None) -> str | list[str] | None:
        parts = [value] if isinstance(value, str) else value or []
        if any("\x00" in part or len(part) > 4096 for part in parts):
            raise ValueError("command and args may not hold NUL characters or exceed 4096 characters")
        return value

    @field_validator("env")
    @classmethod
    def _plain_env(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
            if "\x00" in value or len(value) > 4096:
                raise ValueError(f"env {name!r}: the value may not hold NUL or exceed 4096 characters")
        return env

    @field_validator("name")
    @classmethod
    def _name_separates(cls, value: str) -> str:
        # Tools are exposed as mcp__{server}__{tool}: with no "__" in the server name and no "_" at its
        # end, the first "__" after the prefix is the separator, so two servers' names cannot collide.
        if "__" in value or value.endswith("_"):
            raise ValueError("an MCP server name may not contain '__' or end with '_'")
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://", value, re.IGNORECASE):
            raise ValueError("url must be an http:// or https:// URL (stdio servers take transport stdio)")
        return value

    @field_validator("headers")
    @classmethod
    def _plain_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid header name")
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(f"header {name!r} is set by the MCP transport and cannot be configured")
            # A sealed value (as stored) is ciphertext, checked when it was given in the clear.
            if not is_sealed(value) and not _HEADER_VALUE.match(value):
                raise ValueError(f"header {name!r}: the value must be printable ASCII, at most 4096 chars")
        return headers


class McpTool(BaseModel):
    """A tool as its server described it at discovery; `annotations` keep MCP's names (readOnlyHint…).

    The properties read the hints as the MCP spec defines them (readOnlyHint false, destructiveHint true
    and openWorldHint true when absent; destructiveHint only means something for a tool that is not
    read-only). They are the server's claims: McpToolRef decides whether to believe them.
    """

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    annotations: dict[str, Any] = Field(default_factory=dict)

    @property
    def read_only(self) -> bool:
        return self.annotations.get("readOnlyHint") is True

    @property
    def destructive(self) -> bool:
        return self.annotations.get("destructiveHint") is not False and not self.read_only

    @property
    def open_world(self) -> bool:
        return self.annotations.get("openWorldHint") is True


class McpServer(McpServerCreate):
    """A server's entry in its agent's item: the registration plus the cached result of discovery."""

    model_config = ConfigDict(extra="ignore")

    created_at: Timestamp
    tools: list[McpTool] = Field(default_factory=list)  # type: ignore[assignment]  # the filter is tool_filter
    tool_filter: McpToolFilter | None = None
    discovered_at: Timestamp | None = None  # the last discovery that reached the server
    last_error: str | None = None  # why the last discovery failed (or was cut short); None when it did not

    def status(self, needs_authorization: bool = False) -> ServerStatus:
        """`needs_authorization` comes from the server's grant (stepwise.mcp.authorization), not the item."""
        if self.auth is not None and needs_authorization:
            return "needs_authorization"
        return "failing" if self.last_error is not None else "ready"

    def declared(self, tool: McpTool) -> bool:
        """Whether the agent declares this discovered tool (its server's allow and deny lists)."""
        return self.tool_filter is None or self.tool_filter.admits(tool.name)

    def missing_tools(self) -> list[str]:
        """Allowlisted names the server did not offer at its last discovery (after a rename, say): they
        stay on the list, so the tool comes back if the server offers it again. None before a discovery."""
        if self.tool_filter is None or self.tool_filter.allow is None or self.discovered_at is None:
            return []
        offered = {t.name for t in self.tools}
        return [name for name in self.tool_filter.allow if name not in offered]

    def stale(self, max_age: timedelta = STALE_AFTER, now: datetime | None = None) -> bool:
        return self.discovered_at is None or (now or utcnow()) - self.discovered_at > max_age

    def view(
        self, *, needs_authorization: bool = False, authorization_url: str | None = None
    ) -> McpServerView:
        """The API's view; for an OAuth server, `needs_authorization` is its grant's state."""
        from stepwise.mcp.naming import exposed_names

        names = exposed_names(self.name, [t.name for t in self.tools])
        auth = None
        if self.auth is not None:
            auth = McpOAuthView(type="oauth", scopes=self.auth.scopes, client_id=self.auth.client_id)
        return McpServerView(
            **self.model_dump(exclude={"headers", "env", "tools", "auth", "tool_filter"}),
            tool_filter=self.tool_filter,
            missing_tools=self.missing_tools(),
            auth=auth,
            status=self.status(needs_authorization),
            authorization_url=authorization_url,
            headers=mask_headers(self.headers),
            env=mask_headers(self.env),  # the same secrets in another place: API keys, tokens
            tools=[
                McpToolView(**t.model_dump(), exposed_name=names[t.name], declared=self.declared(t))
                for t in self.tools
            ],
        )


class McpToolView(McpTool):
    exposed_name: str  # the function name the model calls it by
    declared: bool = True  # False: the server offers it, the server's `tools` filter leaves it out


class McpServerView(BaseModel):
    """A server as the API shows it: header and environment names with their values masked."""

    name: str
    transport: Transport
    url: str | None
    headers: dict[str, str]
    command: str | None
    args: list[str]
    env: dict[str, str]
    enabled: bool
    permission: Permission
    permissions: dict[str, ToolPermission] = Field(default_factory=dict)
    trusted: bool
    created_at: Timestamp
    tools: list[McpToolView]
    # The `tools: {allow, deny}` the server was registered with (`tools` here lists what it offers).
    tool_filter: McpToolFilter | None = None
    missing_tools: list[str] = Field(
        default_factory=list, description="Allowlisted names the server no longer offers"
    )
    discovered_at: Timestamp | None
    last_error: str | None
    auth: McpOAuthView | None = None
    status: ServerStatus
    # Only in the answer that starts an authorization: Stepwise's start link a person opens, once, to
    # approve (it binds the callback to their browser, then redirects to the authorization server).
    authorization_url: str | None = None


class McpServerList(BaseModel):
    mcp_servers: list[McpServerView]


class McpToolRef(BaseModel):
    """One MCP tool as a run sees it: what `find` returns for a name the model called.

    `call_tool(ref.server, ref.tool.name, arguments)` runs it. `permission` is the tool's own, like a
    custom tool's (`inherit` takes the agent's default): the server's setting if it has one, else `ask`
    for a destructive tool (or `deny` when that is the agent's default).

    What the tool is comes from its hints only when the server is registered `trusted: true`. Otherwise
    a hint can only add caution: the tool is not read-only (so not parallel-safe, not allowed under
    `allow_reads`, and its effect is `undeclared`, so the ledger runs it once), and it is destructive
    whatever it says (so it asks first, unless the server's or the tool's permission says otherwise).
    """

    model_config = ConfigDict(frozen=True)

    name: str  # mcp__{server}__{tool}, as declared to the model
    server: McpServer
    tool: McpTool
    permission: Permission

    @property
    def read_only(self) -> bool:
        return self.server.trusted and self.tool.read_only

    @property
    def parallel_safe(self) -> bool:
        return self.read_only

    @property
    def destructive(self) -> bool:
        return self.tool.destructive if self.server.trusted else True

    @property
    def open_world(self) -> bool:
        return self.tool.open_world if self.server.trusted else True

    @property
    def effect(self) -> Literal["none", "undeclared"]:
        """MCP offers no idempotency key: a (trusted) read-only tool is pure, anything else is unsafe."""
        return "none" if self.read_only else "undeclared"

    @property
    def key_fields(self) -> list[str]:
        return []


class Defaults(Protocol):
    @property
    def default(self) -> str: ...


class ServerOwner(Protocol):
    """What MCP reads of an agent: its id, its servers' entries (kept in its item) and its default
    permission. Structural, so MCP names no agent model (stepwise.agents.models.Agent is one)."""

    @property
    def agent_id(self) -> str: ...
    @property
    def mcp_servers(self) -> list[dict[str, Any]]: ...
    @property
    def permissions(self) -> Defaults: ...


def servers_of(agent: ServerOwner) -> list[McpServer]:
    """The agent's MCP servers, parsed from its item."""
    return [McpServer.model_validate(s) for s in agent.mcp_servers]


def public_servers(agent: ServerOwner) -> list[dict[str, Any]]:
    """The agent's MCP servers as an API answer may show them (header values masked)."""
    return [s.view().model_dump(mode="json") for s in servers_of(agent)]
