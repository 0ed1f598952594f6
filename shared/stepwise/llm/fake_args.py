"""Arguments that satisfy a tool's JSON Schema, for the `scripted` model to call tools with.

Deterministic on purpose: the same schema always yields the same arguments, so a run replayed
against the scripted model makes the same tool calls.
"""

from __future__ import annotations

import importlib
import math
import re
from typing import Any

from jsonschema import FormatChecker
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from referencing.exceptions import Unresolvable

_MAX_DEPTH = 12  # recursive $refs: a required self-reference cannot be satisfied anyway

_FORMATS: dict[str, str] = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00Z",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "uri": "https://example.com",
    "iri": "https://example.com",
    "url": "https://example.com",
    "uri-reference": "https://example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "duration": "P1D",
}

# `re` has no public parser; this is the one the standard library compiles patterns with. Reached
# through importlib because typeshed only stubs the deprecated `sre_parse` alias.
_re_parser: Any = importlib.import_module("re._parser")


def example_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A deterministic object that validates against `schema` (best effort for patterns)."""
    value = _example(schema, schema, 0)
    return value if isinstance(value, dict) else {}


def _example(schema: Any, root: dict[str, Any], depth: int) -> Any:
    if schema is True or schema == {} or not isinstance(schema, dict):
        return "example"
    if depth > _MAX_DEPTH:
        return None
    if "$ref" in schema:
        target = _resolve(schema["$ref"], root)
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return _example({**(target or {}), **rest}, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    given = list(schema.get("examples") or [])[:3] + ([schema["default"]] if "default" in schema else [])
    for candidate in given:
        if _fits(candidate, schema, root):
            return candidate
    if schema.get("enum"):
        return schema["enum"][0]
    if "allOf" in schema:
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            merged = _merge(merged, part if isinstance(part, dict) else {})
        return _example(merged, root, depth + 1)
    for key in ("oneOf", "anyOf"):
        if schema.get(key):
            return _first_branch(schema, key, root, depth)
    return _by_type(schema, _type_of(schema), root, depth)


def _first_branch(schema: dict[str, Any], key: str, root: dict[str, Any], depth: int) -> Any:
    # The first branch that survives the whole schema: with oneOf, a value matching two branches fails.
    rest = {k: v for k, v in schema.items() if k != key}
    candidates = [
        _example(_merge(rest, b if isinstance(b, dict) else {}), root, depth + 1) for b in schema[key]
    ]
    return next((c for c in candidates if _fits(c, schema, root)), candidates[0])


def _by_type(schema: dict[str, Any], kind: str, root: dict[str, Any], depth: int) -> Any:
    if kind == "object":
        return _object(schema, root, depth)
    if kind == "array":
        return _array(schema, root, depth)
    if kind in ("integer", "number"):
        return _number(schema, integer=kind == "integer")
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema)


def _type_of(schema: dict[str, Any]) -> str:
    declared = schema.get("type")
    if isinstance(declared, list):
        # ["string", "null"]: a real value says more about the tool than null does.
        return next((t for t in declared if t != "null"), "null")
    if isinstance(declared, str):
        return declared
    if {"properties", "required", "additionalProperties"} & schema.keys():
        return "object"
    if {"items", "prefixItems", "minItems"} & schema.keys():
        return "array"
    if {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} & schema.keys():
        return "number"
    return "string"


def _object(schema: dict[str, Any], root: dict[str, Any], depth: int) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    names = list(schema.get("required") or [])
    # minProperties can demand more than `required`: top up with declared properties, in order.
    for name in properties:
        if len(names) >= schema.get("minProperties", 0):
            break
        if name not in names:
            names.append(name)
    out: dict[str, Any] = {}
    for name in names:
        sub = properties.get(name, extra if isinstance(extra, dict) else {})
        out[name] = _example(sub, root, depth + 1)
    return out


def _array(schema: dict[str, Any], root: dict[str, Any], depth: int) -> list[Any]:
    prefix = schema.get("prefixItems") or []
    items = schema.get("items")
    out = [_example(s, root, depth + 1) for s in prefix]
    wanted = max(schema.get("minItems", 0), len(out))
    if isinstance(items, dict) and schema.get("maxItems", 1) > len(out):
        wanted = max(wanted, len(out) + 1)  # one element shows the model-facing shape
    while len(out) < wanted and items is not False:
        out.append(_item(items, root, depth, len(out), unique=bool(schema.get("uniqueItems"))))
    return out


def _item(items: Any, root: dict[str, Any], depth: int, index: int, *, unique: bool) -> Any:
    if unique and isinstance(items, dict) and isinstance(items.get("enum"), list) and items["enum"]:
        return items["enum"][index % len(items["enum"])]
    value = _example(items, root, depth + 1)
    if not (unique and index and isinstance(items, dict)):
        return value
    variants: list[Any] = []
    if isinstance(value, int | float) and not isinstance(value, bool):
        variants = [value + index, value - index, value / (index + 1)]
    elif isinstance(value, str):
        variants = [f"{value}{index}", f"{index}{value}"]
    return next((v for v in variants if _fits(v, items, root)), value)


def _number(schema: dict[str, Any], *, integer: bool) -> int | float:
    low, low_open = _bound(schema, "minimum", "exclusiveMinimum")
    high, high_open = _bound(schema, "maximum", "exclusiveMaximum")
    step = schema.get("multipleOf")
    if low is not None:
        value: float = low
        if low_open:
            value = math.floor(low) + 1 if integer else (low + 1 if high is None else (low + high) / 2)
    else:
        value = 1
        if high is not None and (value > high or (high_open and value >= high)):
            if integer:
                value = math.ceil(high) - 1 if high_open else math.floor(high)
            else:
                value = high - 1 if high_open else high
    if integer:
        value = math.ceil(value)
    if step:
        value = math.ceil(round(value / step, 9)) * step
        if high is not None and (value > high or (high_open and value >= high)):
            value = math.floor(round(high / step, 9)) * step
        value = round(value, 9)
    if integer:
        return int(value)
    return float(value)


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[float | None, bool]:
    flag = schema.get(exclusive)
    if isinstance(flag, bool):  # draft 4: a flag on minimum/maximum
        return schema.get(inclusive), flag
    if isinstance(flag, int | float):
        limit = schema.get(inclusive)
        inclusive_is_tighter = limit is not None and (
            limit > flag if inclusive == "minimum" else limit < flag
        )
        return (limit, False) if inclusive_is_tighter else (flag, True)
    return schema.get(inclusive), False


def _string(schema: dict[str, Any]) -> str:
    low = schema.get("minLength", 0)
    high = schema.get("maxLength")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        for extra in (0, 1, 2, 4, low):
            candidate = _from_pattern(pattern, extra)
            if candidate is not None and len(candidate) >= low and (high is None or len(candidate) <= high):
                return candidate
    base = _FORMATS.get(schema.get("format", ""), "example")
    if len(base) < low:
        base += "x" * (low - len(base))
    return base if high is None else base[:high]


def _from_pattern(pattern: str, extra: int) -> str | None:
    """The shortest-ish string the regex matches, with `extra` more rounds of each open repeat."""
    try:
        parsed = _re_parser.parse(pattern)
        text = _render(list(parsed.data), extra, {})
    except (re.error, _Unsupported, ValueError, RecursionError):
        return None
    return text if re.search(pattern, text) else None


class _Unsupported(Exception):
    pass


def _render(items: list[Any], extra: int, groups: dict[int, str]) -> str:
    out: list[str] = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("a" if arg != ord("a") else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_char_in(arg))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            out.extend(_render(list(sub), extra, groups) for _ in range(min(low + extra, high)))
        elif name == "SUBPATTERN":
            group, sub = arg[0], arg[-1]
            text = _render(list(sub), extra, groups)
            if group:
                groups[group] = text
            out.append(text)
        elif name == "ATOMIC_GROUP":
            out.append(_render(list(arg), extra, groups))
        elif name == "BRANCH":
            out.append(_render(list(arg[1][0]), extra, groups))
        elif name == "GROUPREF":
            out.append(groups.get(arg, ""))
        elif name not in ("AT", "ASSERT", "ASSERT_NOT"):
            raise _Unsupported(name)
    return "".join(out)


_CATEGORY_CHARS = {
    "CATEGORY_DIGIT": "0",
    "CATEGORY_NOT_DIGIT": "a",
    "CATEGORY_WORD": "a",
    "CATEGORY_NOT_WORD": "-",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": "a",
}


def _char_in(members: list[Any]) -> str:
    if members and str(members[0][0]) == "NEGATE":
        rest = members[1:]
        return next(c for c in "aAz0_-. x" if not _in_class(c, rest))
    op, arg = members[0]
    if str(op) == "LITERAL":
        return chr(arg)
    if str(op) == "RANGE":
        return chr(arg[0])
    if str(op) == "CATEGORY":
        return _CATEGORY_CHARS.get(str(arg), "a")
    raise _Unsupported(str(op))


def _in_class(char: str, members: list[Any]) -> bool:
    for op, arg in members:
        name = str(op)
        if (name == "LITERAL" and chr(arg) == char) or (name == "RANGE" and arg[0] <= ord(char) <= arg[1]):
            return True
        if name == "CATEGORY" and re.fullmatch(_category_regex(str(arg)), char):
            return True
    return False


def _category_regex(category: str) -> str:
    return {
        "CATEGORY_DIGIT": r"\d",
        "CATEGORY_NOT_DIGIT": r"\D",
        "CATEGORY_WORD": r"\w",
        "CATEGORY_NOT_WORD": r"\W",
        "CATEGORY_SPACE": r"\s",
        "CATEGORY_NOT_SPACE": r"\S",
    }.get(category, r"(?!)")


def _merge(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    merged = {**base, **part}
    if "properties" in base and "properties" in part:
        merged["properties"] = {**base["properties"], **part["properties"]}
    if "required" in base and "required" in part:
        merged["required"] = list(dict.fromkeys([*base["required"], *part["required"]]))
    return merged


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any] | None:
    """Local JSON pointers only ("#/$defs/x"); a remote $ref yields None and so a plain example."""
    if not ref.startswith("#"):
        return None
    node: Any = root
    for raw in ref[1:].split("/")[1:]:
        key = raw.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, dict) else None


def _fits(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> bool:
    # Validate in the root's context so local $refs inside `schema` still resolve.
    scoped = {**schema}
    for defs in ("$defs", "definitions"):
        if defs in root and defs not in scoped:
            scoped[defs] = root[defs]
    try:
        validator = validator_for(root)(scoped, format_checker=FormatChecker())
        return bool(validator.is_valid(value))
    except (SchemaError, Unresolvable):
        return True  # cannot check: keep the author's value, as a model would
