"""Review finding 3: a stdio MCP server runs as the function's user, and read the function's AWS
credentials through /proc/$PPID/environ. The function now makes itself non-dumpable before it spawns one.

The spawning side runs in its own process (tests/fakes/stdio_spy.py), as an unprivileged user when these
tests run as root: root's capabilities read any process's environment, dumpable or not, which Lambda's
function user cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECRET = "spy-secret-4f1e"


def spied() -> str:
    unprivileged = (
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    )
    env = {**os.environ, "SPY_SECRET": SECRET, "STEPWISE_ALLOW_STDIO_MCP": "true"}
    done = subprocess.run(
        [*unprivileged, sys.executable, "-m", "tests.fakes.stdio_spy"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_a_stdio_server_cannot_read_the_functions_environment() -> None:
    quoted = spied()

    assert quoted == "PermissionError"
    assert SECRET not in quoted
