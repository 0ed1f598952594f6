"""The one small expression language of workflows: paths, templates and conditions. Never eval.

A **path** names a value in the workflow's data: `input` (the run's input) or `input.<field>...`,
`nodes.<id>.output` or `nodes.<id>.output.<field>...` (a node's output), `item` or `item.<field>...`
(the current item inside a map). Segments are names (`[A-Za-z_][A-Za-z0-9_]*`) or list indexes
(digits). A path compiles to the JSONPath a Choice or a Map reads (`$.nodes.critic.output.verdict`).

A **template** is text with `{{ path }}` in it: each is replaced by the value at the path, a string as
it is and anything else as compact JSON; a path that leads nowhere gives the empty string.

A **condition** is `{path, equals | matches | exists}`: `equals` compares with a string, number,
boolean or null (of that type: "1" does not equal 1), `matches` is a wildcard pattern where `*` is any
text (Step Functions' StringMatches), `exists` is whether the path leads to a value (`exists: false`:
it does not). A condition on a path that leads nowhere is false (but `exists: false`, which is true)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SEGMENT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|\d+)$")
TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
MISSING = object()


class BadPath(ValueError):
    """A path outside the language: says why."""


@dataclass(frozen=True)
class Path:
    """A parsed path: its root (`input`, `item` or `nodes`), the node it names (for `nodes`), and the
    segments below that (below `output` for a node)."""

    root: str
    node: str | None
    rest: tuple[str, ...]

    @property
    def jsonpath(self) -> str:
        head = (
            "$.input"
            if self.root == "input"
            else "$.item"
            if self.root == "item"
            else f"$.nodes.{self.node}.output"
        )
        return head + "".join(f"[{s}]" if s.isdigit() else f".{s}" for s in self.rest)


def parse(text: str) -> Path:
    segments = text.strip().split(".")
    if not all(SEGMENT.match(s) for s in segments):
        raise BadPath(f"{text!r} is not a path: segments are names or list indexes, joined by dots")
    root, rest = segments[0], tuple(segments[1:])
    if root in ("input", "item"):
        return Path(root, None, rest)
    if root == "nodes":
        if len(rest) < 2 or rest[1] != "output":
            raise BadPath(f"{text!r}: a node's value is `nodes.<id>.output`, or a field below it")
        return Path("nodes", rest[0], rest[2:])
    raise BadPath(f"{text!r}: a path starts with input, nodes or item")


def template_paths(template: str) -> list[Path]:
    """The paths a template refers to (BadPath for one outside the language)."""
    return [parse(m.group(1)) for m in TEMPLATE.finditer(template)]


def lookup(data: dict[str, Any], path: Path, resolve: Callable[[Any], Any] | None = None) -> Any:
    """The value at `path` in the workflow's data (`{input, nodes, item}`), or MISSING. `resolve` turns
    a node output kept by reference into its value."""
    if path.root == "nodes":
        entry = (data.get("nodes") or {}).get(path.node or "")
        if not isinstance(entry, dict) or "output" not in entry:
            return MISSING
        value = entry["output"]
        if resolve is not None:
            value = resolve(value)
    elif path.root in data:
        value = data[path.root]
    else:
        return MISSING
    for segment in path.rest:
        if isinstance(value, dict) and segment in value:
            value = value[segment]
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return MISSING
    return value


def render(template: str, data: dict[str, Any], resolve: Callable[[Any], Any] | None = None) -> str:
    def one(match: re.Match[str]) -> str:
        value = lookup(data, parse(match.group(1)), resolve)
        if value is MISSING or value is None:
            return ""
        return (
            value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        )

    return TEMPLATE.sub(one, template)
