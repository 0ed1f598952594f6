"""The template language of triggers: `{{path}}` placeholders over the event, nothing else.

A path is names and list indexes joined by dots, read from the event's JSON body: `{{action}}`,
`{{pull_request.title}}`, `{{commits.0.message}}`. Names starting with `$` read the delivery rather
than the body: `{{$event}}` is the whole body (as received), `{{$headers.<name>}}` a request header
(lower case), `{{$delivery_id}}`, `{{$trigger_id}}`, `{{$received_at}}`.

A missing value renders as nothing; a string as itself; anything else as compact JSON. There is no
logic (no conditions, loops or filters): what an agent needs to decide, it reads from the message.
Templates are checked when a trigger is created or changed, so a bad one is a 422 then, not a
delivery that fails later.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_TEMPLATE = 100_000
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PATH = re.compile(r"^\$?[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
META = ("$event", "$headers", "$delivery_id", "$trigger_id", "$received_at")


class TemplateError(ValueError):
    """A template that cannot be rendered: an unclosed `{{`, an empty or malformed path."""


def check(template: str) -> str:
    """`template` itself when every placeholder is well formed; else TemplateError naming a bad one."""
    rest = _PLACEHOLDER.sub("", template)
    if "{{" in rest or "}}" in rest:
        raise TemplateError(
            "a `{{` without its `}}` (or the other way round): write placeholders as {{path}}"
        )
    for match in _PLACEHOLDER.finditer(template):
        path = match.group(1)
        if not _PATH.fullmatch(path):
            raise TemplateError(
                f"{{{{{path}}}}} is not a path: names and indexes joined by dots ({{{{pull_request.title}}}})"
            )
        if path.startswith("$") and path.split(".")[0] not in META:
            raise TemplateError(f"{{{{{path}}}}}: the delivery's own fields are {', '.join(META)}")
    return template


def lookup(context: Any, path: str) -> Any:
    """The value at `path` in `context`, or None when any step of it is missing."""
    value: Any = context
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
        if value is None:
            return None
    return value


def text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def render(template: str, body: Any, meta: dict[str, Any]) -> str:
    """`template` with each placeholder replaced: `$` paths from `meta` (keys `$event`, `$headers`, ...),
    the others from the event's `body`."""

    def one(match: re.Match[str]) -> str:
        path = match.group(1)
        if path.startswith("$"):
            head, _, tail = path.partition(".")
            value = meta.get(head)
            return text_of(lookup(value, tail) if tail and isinstance(value, dict) else value)
        return text_of(lookup(body, path) if isinstance(body, (dict, list)) else None)

    return _PLACEHOLDER.sub(one, template)
