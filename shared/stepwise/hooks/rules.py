"""Rule hooks: conditions on a tool call's arguments or output, evaluated locally.

Semantics, in the order a hook's rules are written:

- A rule's `field` is an argument name, a dotted path into nested arguments (`a.b.c`, with list
  indexes such as `items.0.name`), or `output` (`output.a.b` for a path into a structured output).
  A field that is absent, or null, never matches, whatever the operator.
- The value compared is the field's text: a string as it is, anything else as JSON with sorted keys
  (the same text the model sees for a structured tool result).
- CONTAINS, STARTS_WITH and IN (the text equals one of the listed strings) are case-sensitive exact
  comparisons; MATCHES is a search with RE2 (stepwise.hooks.patterns: linear time, RE2 syntax), so
  `(?i)` makes it case-insensitive and `^…$` anchors it.
- The first rule that matches decides the hook, like a firewall's ordered rules: a deny blocks, an
  allow ends this hook's evaluation with allow, which is how an exception is written before a broader
  deny. With only deny rules this is exactly "the first matching deny wins". An allow never outlasts
  its hook: every other hook of the event still runs and can still deny.
- MATCHES runs on at most MATCH_INPUT_LIMIT characters. A longer value cannot be checked in bounded
  time, so it fails closed: it matches a deny rule (padding a value must not slip it past a deny) and
  does not match an allow rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from stepwise.hooks.models import OUTPUT_FIELD, HookDecision, Rule
from stepwise.hooks.patterns import MATCH_INPUT_LIMIT, search


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def evaluate_rules(
    rules: Sequence[Rule], *, arguments: Mapping[str, Any] | None, output: Any = None
) -> HookDecision:
    """Allow or deny by the first matching rule (allow when none matches); see the module docstring."""
    for rule in rules:
        value = resolve_field(rule.field, arguments=arguments, output=output)
        if value is MISSING:
            continue
        text = as_text(value)
        if rule.operator == "MATCHES" and len(text) > MATCH_INPUT_LIMIT:
            if rule.action == "deny":
                return HookDecision(
                    action="deny",
                    message=rule.message
                    or f"blocked by a hook rule: {rule.field} is over {MATCH_INPUT_LIMIT} characters, "
                    "too long to check against its pattern",
                )
            continue
        if not matches(rule, text):
            continue
        if rule.action == "allow":
            return HookDecision(action="allow", message=rule.message)
        return HookDecision(
            action="deny", message=rule.message or f"blocked by a hook rule on {rule.field} ({rule.operator})"
        )
    return HookDecision(action="allow")


def matches(rule: Rule, text: str) -> bool:
    """Whether `text` (the field's text) satisfies the rule's operator and value."""
    value = rule.value
    if rule.operator == "IN":
        return isinstance(value, list) and text in value
    assert isinstance(value, str)  # the model allows a list for IN only
    if rule.operator == "CONTAINS":
        return value in text
    if rule.operator == "STARTS_WITH":
        return text.startswith(value)
    # MATCHES: the pattern passed compile_pattern when the hook was made.
    return search(value, text)


def resolve_field(field: str, *, arguments: Mapping[str, Any] | None, output: Any = None) -> Any:
    """The value `field` names, or MISSING. `output` (and `output.…`) reads the output, the rest arguments."""
    head, *rest = field.split(".")
    if head == OUTPUT_FIELD:
        current: Any = output
    else:
        if arguments is None or head not in arguments:
            return MISSING
        current = arguments[head]
    for segment in rest:
        if isinstance(current, Mapping):
            if segment not in current:
                return MISSING
            current = current[segment]
        elif (
            isinstance(current, list | tuple)
            and segment.isascii()
            and segment.isdigit()
            and int(segment) < len(current)
        ):
            current = current[int(segment)]
        else:
            return MISSING
    return MISSING if current is None else current


def as_text(value: Any) -> str:
    """A value as rules compare it: strings unchanged, anything else as JSON with sorted keys."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):  # keys that cannot be sorted or encoded, circular structures
        return str(value)
