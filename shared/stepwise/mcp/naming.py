"""How an MCP tool is named to the model: `mcp__{server}__{tool}`, within what every provider accepts.

Providers take function names matching `^[a-zA-Z0-9_-]{1,64}$` (stepwise.tools.models.TOOL_NAME). A server
name already fits (and has no "__", so names cannot collide across servers); a tool's own name may hold
any character and any length, so it is cleaned and, when it had to be cut or collides with another of
the server's tools after cleaning, given a short digest of its real name. The result depends only on the
server's name and its tools' names, so it is the same on every step and every run.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable

PREFIX = "mcp__"
SEPARATOR = "__"
NAME_LIMIT = 64
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def exposed_name(server: str, tool: str, *, disambiguate: bool = False) -> str:
    """`mcp__{server}__{tool}` with the tool's name made safe and the whole at most 64 characters."""
    head = f"{PREFIX}{server}{SEPARATOR}"
    room = NAME_LIMIT - len(head)
    clean = _UNSAFE.sub("_", tool) or "_"
    if disambiguate or len(clean) > room:
        suffix = "_" + hashlib.sha256(tool.encode()).hexdigest()[:8]
        clean = clean[: room - len(suffix)] + suffix
    return head + clean


def exposed_names(server: str, tools: Iterable[str]) -> dict[str, str]:
    """The exposed name of each of a server's tools, unique among them.

    A tool whose cleaned name another tool also gets keeps it only if it needed no cleaning; the others
    get a digest (`a.b` and `a_b` become `…__a_b_1f2e3d4c` and `…__a_b`).
    """
    names = list(dict.fromkeys(tools))
    plain = {tool: exposed_name(server, tool) for tool in names}
    counts = Counter(plain.values())
    exact = {tool: f"{PREFIX}{server}{SEPARATOR}{tool}" for tool in names}
    return {
        tool: name
        if counts[name] == 1 or name == exact[tool]
        else exposed_name(server, tool, disambiguate=True)
        for tool, name in plain.items()
    }
