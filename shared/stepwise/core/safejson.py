"""JSON from a model or a tenant, parsed with a cap on its nesting.

Python's parser recurses once per level: a few thousand brackets raise RecursionError (not a
ValueError, so no `except ValueError` sees it) and whatever walks a deep value afterwards (pydantic,
jsonschema, json.dumps) recurses again. No tool argument, hook reply or API body needs more than a few
dozen levels, so everything that parses text from outside goes through `loads`, which refuses a
document deeper than MAX_DEPTH with `TooDeep` (a ValueError, like any other unreadable JSON).
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64  # levels of arrays and objects; a scalar alone is depth 0


class TooDeep(ValueError):
    """JSON nested deeper than the cap."""

    def __init__(self, max_depth: int) -> None:
        super().__init__(f"the JSON nests deeper than {max_depth} levels of arrays and objects")
        self.max_depth = max_depth


def loads(text: str | bytes | bytearray, *, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads`, but a document nested deeper than `max_depth` is a TooDeep (a ValueError)."""
    try:
        value = json.loads(text)
    except RecursionError:  # deeper than the interpreter's stack allows, so deeper than any cap
        raise TooDeep(max_depth) from None
    check_depth(value, max_depth=max_depth)
    return value


def check_depth(value: Any, *, max_depth: int = MAX_DEPTH) -> Any:
    """`value` itself when it nests at most `max_depth` levels, else TooDeep. Iterative: a value too
    deep to walk recursively is measured all the same."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        current, depth = pending.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list | tuple):
            children = current
        else:
            continue
        if depth + 1 > max_depth:
            raise TooDeep(max_depth)
        pending.extend((child, depth + 1) for child in children)
    return value
