"""What the knowledge-base builtins share: metadata filters in Bedrock's `RetrievalFilter` shape.

Bedrock's filter is a tagged union; the three members kept here are enough to scope a base to folders or
tags (eli.ai's kbScope) and for the model to narrow a search:

    {"equals": {"key": "team", "value": "hr"}}
    {"in":     {"key": "folder", "value": ["policies", "handbook"]}}
    {"andAll": [<filter>, <filter>, ...]}         (2 to MAX_AND members, nested at most MAX_DEPTH deep)

A value is a string, a number or a boolean, as the data source's `.metadata.json` files give them.
Bedrock itself knows more operators (notEquals, orAll, startsWith...); an `orAll` from the model could
widen what a tool config scoped, so only conjunctions are accepted and the config's filter is always
ANDed with the model's (`combined`).
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 3
MAX_AND = 5  # members of one andAll (Bedrock's own limit is 5)
MAX_IN = 100  # values of one `in`
KEY_LIMIT = 100
VALUE_LIMIT = 1000  # characters of one string value
OPERATORS = ("equals", "in", "andAll")


def check_filter(value: Any, *, depth: int = 1, where: str = "filter") -> dict[str, Any]:
    """`value` as a filter Bedrock accepts; ValueError naming the part that is wrong otherwise."""
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError(f"{where}: must be an object with exactly one of {', '.join(OPERATORS)}")
    ((operator, body),) = value.items()
    if operator == "andAll":
        if depth >= MAX_DEPTH:
            raise ValueError(f"{where}: andAll is nested more than {MAX_DEPTH} levels deep")
        if not isinstance(body, list) or not 2 <= len(body) <= MAX_AND:
            raise ValueError(f"{where}.andAll: must be a list of 2 to {MAX_AND} filters")
        members = [
            check_filter(member, depth=depth + 1, where=f"{where}.andAll[{i}]")
            for i, member in enumerate(body)
        ]
        return {"andAll": members}
    if operator not in OPERATORS:
        raise ValueError(f"{where}: {operator!r} is not supported (use {', '.join(OPERATORS)})")
    if not isinstance(body, dict) or set(body) != {"key", "value"}:
        raise ValueError(f"{where}.{operator}: must be {{key, value}}")
    key = body["key"]
    if not isinstance(key, str) or not 1 <= len(key) <= KEY_LIMIT:
        raise ValueError(f"{where}.{operator}.key: must be a string of 1 to {KEY_LIMIT} characters")
    if operator == "equals":
        return {"equals": {"key": key, "value": _scalar(body["value"], f"{where}.equals.value")}}
    values = body["value"]
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_IN:
        raise ValueError(f"{where}.in.value: must be a list of 1 to {MAX_IN} values")
    return {"in": {"key": key, "value": [_scalar(v, f"{where}.in.value[{i}]") for i, v in enumerate(values)]}}


def _scalar(value: Any, where: str) -> str | int | float | bool:
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and len(value) <= VALUE_LIMIT:
        return value
    raise ValueError(f"{where}: must be a string (at most {VALUE_LIMIT} characters), a number or a boolean")


def combined(scope: dict[str, Any] | None, narrowing: dict[str, Any] | None) -> dict[str, Any] | None:
    """The filter Retrieve gets: the tool config's scope AND the model's own filter."""
    if scope is None or narrowing is None:
        return scope or narrowing
    return {"andAll": [scope, narrowing]}


FILTER_DESCRIPTION = (
    "Only passages whose metadata matches, in Bedrock's filter shape: "
    '{"equals": {"key", "value"}}, {"in": {"key", "value": [...]}} or {"andAll": [filter, filter, ...]}.'
)
