"""Hook rules (stepwise.hooks.rules) against generated arguments and rule lists: the field a path names
is found wherever it sits, the first matching rule decides (checked against a model of that sentence),
a deny still denies however the value is padded, and MATCHES fails closed past its input limit.

(Hooks hold no templates in this codebase: what a tenant writes is rules, with RE2 patterns for
MATCHES, and those are generated here.)"""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from stepwise.hooks.models import Rule
from stepwise.hooks.patterns import MATCH_INPUT_LIMIT
from stepwise.hooks.rules import MISSING, as_text, evaluate_rules, resolve_field

NAMES = st.text(alphabet="abcxyz_", min_size=1, max_size=4)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=8))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(NAMES, inner, max_size=3)),
    max_leaves=8,
)
WORDS = st.text(alphabet="abc rm-", min_size=1, max_size=5)


def _paths(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every (dotted path, value) inside `value`, as a rule's field names them."""
    found = [(prefix, value)] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list) and prefix:
        for index, child in enumerate(value):
            found += _paths(child, f"{prefix}.{index}")
    return found


@given(st.dictionaries(NAMES, JSON, min_size=1, max_size=4))
def test_a_path_finds_the_value_it_names_and_null_is_missing(arguments: dict[str, Any]) -> None:
    for path, value in _paths(arguments):
        found = resolve_field(path, arguments=arguments)
        assert found is MISSING if value is None else found == value, (path, value, found)
    assert resolve_field("nope.0.x", arguments=arguments) is MISSING or "nope" in arguments


@st.composite
def rules(draw: st.DrawFn) -> Rule:
    operator = draw(st.sampled_from(["CONTAINS", "STARTS_WITH", "IN", "MATCHES"]))
    if operator == "IN":
        value: str | list[str] = draw(st.lists(WORDS, min_size=1, max_size=3))
    elif operator == "MATCHES":
        value = draw(st.sampled_from(["rm", "^a", "b$", "(?i)RM -", "a|c", "[ab]{2}"]))
    else:
        value = draw(WORDS)
    return Rule(field="cmd", operator=operator, value=value, action=draw(st.sampled_from(["deny", "allow"])))


def _model_matches(rule: Rule, text: str) -> bool:
    # the patterns drawn above mean the same in Python's re as in RE2
    if rule.operator == "IN":
        return text in rule.value
    assert isinstance(rule.value, str)
    if rule.operator == "CONTAINS":
        return rule.value in text
    if rule.operator == "STARTS_WITH":
        return text.startswith(rule.value)
    return re.search(rule.value, text) is not None


@given(st.lists(rules(), min_size=1, max_size=5), st.text(alphabet="abc rm-", max_size=12))
def test_the_first_matching_rule_decides(ordered: list[Rule], command: str) -> None:
    decided = evaluate_rules(ordered, arguments={"cmd": command})
    first = next((r for r in ordered if _model_matches(r, command)), None)
    assert decided.action == (first.action if first else "allow"), (ordered, command)


@given(WORDS, st.text(max_size=20), st.text(max_size=20))
def test_a_deny_on_contains_denies_however_the_value_is_padded(word: str, before: str, after: str) -> None:
    deny = Rule(field="cmd", operator="CONTAINS", value=word)
    assert evaluate_rules([deny], arguments={"cmd": before + word + after}).action == "deny"


@given(st.sampled_from(["deny", "allow"]), st.integers(1, 50))
def test_matches_past_its_input_limit_fails_closed(action: str, extra: int) -> None:
    long = "x" * (MATCH_INPUT_LIMIT + extra)
    rule = Rule(field="cmd", operator="MATCHES", value="nothing-like-this", action=action)
    decided = evaluate_rules([rule], arguments={"cmd": long})
    assert decided.action == "deny" if action == "deny" else decided.action == "allow"


@given(JSON)
def test_a_structured_value_is_compared_as_its_sorted_json(value: Any) -> None:
    text = as_text(value)
    if isinstance(value, str):
        assert text == value
    else:
        assert json.loads(text) == value and text == json.dumps(value, ensure_ascii=False, sort_keys=True)
