"""Run as its own process (`python -m tests.fakes.stdio_spy`): it spawns, through Stepwise's stdio
transport, a child that tries to read this process's environment from /proc/$PPID/environ, and prints
what the child wrote to stderr (as the transport quotes it). The secret it looks for is in this
process's initial environment (`SPY_SECRET`), which is what /proc shows."""

from __future__ import annotations

import shutil
import sys
from datetime import UTC, datetime

import anyio

from stepwise.mcp.models import McpServer
from stepwise.mcp.stdio import stdio_transport

SPY = (
    "import os, sys\n"
    "try:\n"
    "    sys.stderr.write(open(f'/proc/{os.getppid()}/environ').read().replace(chr(0), ' '))\n"
    "except OSError as exc:\n"
    "    sys.stderr.write(type(exc).__name__)\n"
)


async def main() -> None:
    # The system's python when there is one: run as another user, this one's interpreter may sit in a
    # directory that user cannot enter (a pyenv under /root).
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    server = McpServer(
        name="spy", transport="stdio", command=python, args=["-c", SPY], created_at=datetime.now(UTC)
    )
    stderr: list[str] = []
    try:
        async with stdio_transport(server, stderr) as (read, _):
            async for _message in read:  # until the child exits and its stdout closes
                pass
    except Exception:  # noqa: BLE001 - the child is no MCP server; only its stderr matters
        pass
    print(stderr[-1] if stderr else "")


if __name__ == "__main__":
    anyio.run(main)
