"""An MCP server spoken to over stdio, built with the official SDK; run as a script by the tests
(`[sys.executable, STDIO_SERVER]`), so it is a real process with its own environment and directory.

Tools: `env(name)` answers that variable of its environment (or "<unset>"), `cwd()` its working directory,
`pid()` its process id, `slow(seconds, pidfile)` writes its pid to `pidfile` and sleeps. It says hello on
stderr when it starts, so tests can see stderr is captured.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

STDIO_SERVER = str(Path(__file__).resolve())
READ_ONLY = ToolAnnotations(read_only_hint=True)


def build() -> MCPServer:
    server = MCPServer("fake-stdio")

    @server.tool(annotations=READ_ONLY)
    def env(name: str) -> str:
        """One variable of the server's environment."""
        return os.environ.get(name, "<unset>")

    @server.tool(annotations=READ_ONLY)
    def cwd() -> str:
        """The server's working directory."""
        return os.getcwd()

    @server.tool(annotations=READ_ONLY)
    def pid() -> str:
        """The server's process id."""
        return str(os.getpid())

    @server.tool()
    def slow(seconds: float, pidfile: str) -> str:
        """Write the pid to pidfile, then sleep."""
        Path(pidfile).write_text(str(os.getpid()))
        time.sleep(seconds)
        return "woke up"

    return server


if __name__ == "__main__":
    sys.stderr.write("fake stdio server says hello\n")
    sys.stderr.flush()
    build().run("stdio")
