"""stdio MCP servers: a process spawned for each discovery and each call, only where the operator allows.

Spawning a process from a server is a deliberate choice (the command runs with the function's own
rights, and any tenant that can register a server picks the command), so it is off unless the operator
sets STEPWISE_ALLOW_STDIO_MCP=true (template parameter AllowStdioMcp). The setting is read when a server
is registered and again at every spawn: turning it off stops stored stdio servers at once.

Each spawn gets a fresh empty working directory, removed afterwards, and an environment of the SDK's
short non-secret base (PATH, HOME, USER, LOGNAME, SHELL, TERM: what finding and starting a program
needs) plus exactly the `env` the server's config names. The caller's deadline bounds the whole
exchange; the SDK then closes stdin and kills the process group, each step bounded.

What that does not do (review finding 3): the process runs as the function's own user, so whatever that
user can read, it can read. Before the first spawn the function makes itself non-dumpable
(prctl PR_SET_DUMPABLE 0), which makes its /proc/<pid>/environ and memory unreadable to processes of the
same user, so the child cannot read the function's AWS credentials through /proc/$PPID/environ. It still
has the function's network, its /tmp, and whatever else the user may read: allowing stdio servers
(`AllowStdioMcp`) gives whoever registers one the function's rights, less its environment. Its stderr
is never quoted raw: a short excerpt, credentials masked (stepwise.core.masking.masked_excerpt).
"""

from __future__ import annotations

import ctypes
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from stepwise.core import config
from stepwise.core.errors import Unprocessable
from stepwise.core.masking import masked_excerpt

if TYPE_CHECKING:
    from mcp.client._transport import TransportStreams

    from stepwise.mcp.models import McpServer

ALLOW_ENV = config.Guards.variable("allow_stdio_mcp")
REFUSED = (
    "stdio MCP servers are turned off on this deployment: a server is reached over streamable HTTP "
    f"at an http:// or https:// URL unless the operator sets {ALLOW_ENV}=true"
)
STDERR_LIMIT = 300  # characters of the process's stderr quoted in a failure, masked
_PR_SET_DUMPABLE = 4  # linux/prctl.h


def allowed() -> bool:
    """Whether the operator allows stdio servers; read on every use, never cached."""
    return config.guards().allow_stdio_mcp


def ensure_allowed() -> None:
    """422 `stdio_not_allowed` unless the operator allows stdio servers."""
    if not allowed():
        raise Unprocessable(REFUSED, code="stdio_not_allowed")


def keep_environment_private() -> bool:
    """Make this process non-dumpable, so a child of the same user cannot read /proc/<our pid>/environ
    (our AWS credentials) or our memory; whether it held. Called before every spawn: the flag is reset
    when the process changes credentials, and it costs one syscall."""
    if sys.platform != "linux":
        return True  # no /proc to read it through (Lambda is Linux; this is a developer's machine)
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)


@asynccontextmanager
async def stdio_transport(server: McpServer, stderr: list[str]) -> AsyncIterator[TransportStreams]:
    """The SDK's stdio transport to a fresh process of `server`; what the process wrote to stderr is
    appended to `stderr` (its last STDERR_LIMIT characters, credentials masked) once it is gone. The
    caller checks `allowed()` first, to fail as it fails."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    if not allowed():  # the caller checked; a spawn is never one check away from happening anyway
        raise PermissionError(REFUSED)
    assert server.command is not None  # the model requires one for transport stdio
    if not keep_environment_private():
        raise PermissionError("this function could not keep its environment from a stdio MCP server")
    parameters = StdioServerParameters(command=server.command, args=server.args, env=server.env)
    with (
        tempfile.TemporaryDirectory(prefix="mcp-stdio-", ignore_cleanup_errors=True) as workdir,
        tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog,
    ):
        parameters.cwd = workdir
        try:
            async with stdio_client(parameters, errlog=errlog) as streams:
                yield streams
        finally:
            errlog.seek(0)
            text = errlog.read().strip()
            if text:
                stderr.append(masked_excerpt(text, STDERR_LIMIT))
