"""Regular expressions that tenants write for MATCHES rules, kept from stalling a Lambda.

Python's `re` backtracks and has no timeout, so a pattern like `(a+)+$` takes exponential time on a
few dozen characters. Three cheap limits bound the cost: the pattern's length, a refusal of repeated
groups that themselves hold an unbounded quantifier (the shape behind exponential backtracking), and
the amount of text a pattern is run against (which bounds the polynomial cases).
"""

from __future__ import annotations

import re

PATTERN_LIMIT = 512  # characters of a MATCHES pattern
MATCH_INPUT_LIMIT = 10_000  # characters of a value a MATCHES pattern is run against

# `*`, `+` and `{n,}`: quantifiers without an upper bound (a following `?` or `+` only changes greed).
_UNBOUNDED = re.compile(r"[*+]|\{\d*,\}")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The compiled pattern, or ValueError saying why it is refused."""
    if len(pattern) > PATTERN_LIMIT:
        raise ValueError(f"MATCHES pattern is over {PATTERN_LIMIT} characters")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc}") from None
    if has_nested_quantifier(pattern):
        raise ValueError(
            f"regex {pattern!r} repeats a group that holds an unbounded quantifier, like (a+)+, which can "
            "take exponential time; rewrite it without the nesting (e.g. (a+)+ as a+, "
            "(\\w+\\s?)+ as [\\w\\s]+)"
        )
    return compiled


def has_nested_quantifier(pattern: str) -> bool:
    """Whether a group containing `*`, `+` or `{n,}` is itself repeated by one: `(a+)+`, `(?:\\w*\\s)*`.

    A heuristic over a pattern that already compiles: it reads escapes and character classes, not the
    full grammar, and it misses other slow shapes such as overlapping alternations (`(a|a)*`).
    """
    groups: list[bool] = []  # for each open group: whether it holds an unbounded quantifier so far
    i = 0
    while i < len(pattern):
        char = pattern[i]
        holds_unbounded = False
        if char == "(":
            groups.append(False)
            i += 1
            continue
        if char == ")":
            holds_unbounded = groups.pop() if groups else False
            i += 1
        elif char == "\\":
            i += 2
        elif char == "[":
            i = _class_end(pattern, i)
        else:
            i += 1
        quantifier = _UNBOUNDED.match(pattern, i)
        if quantifier is not None:
            if holds_unbounded:
                return True
            i = quantifier.end()
        if (quantifier is not None or holds_unbounded) and groups:
            groups[-1] = True
    return False


def _class_end(pattern: str, start: int) -> int:
    """The index just past the character class that opens at `start`."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":  # a leading ] is a literal
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i + 1
