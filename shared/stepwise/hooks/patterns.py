"""Regular expressions that tenants write for MATCHES rules, run by RE2 so none can stall a Lambda.

Python's `re` backtracks and has no timeout: `(a+)+$`, `(a|a)*$` and shapes no heuristic recognises take
exponential time on a few dozen characters. RE2 (google-re2) matches in time linear in the input, so the
cost of a rule is bounded by the pattern's and the value's lengths, both capped here. The price is RE2's
syntax: no backreferences (`\\1`) and no lookaround (`(?=…)`, `(?<!…)`), and `\\d`, `\\w`, `\\s` are ASCII.
A pattern RE2 cannot compile is refused when the hook is made (a 422), with RE2's own reason.
"""

from __future__ import annotations

import functools

import re2

PATTERN_LIMIT = 512  # characters of a MATCHES pattern
MATCH_INPUT_LIMIT = 10_000  # characters of a value a MATCHES pattern is run against
PATTERN_MEMORY = 1 << 20  # bytes RE2 may spend on one compiled pattern: a rule, not a grammar


def compile_pattern(pattern: str) -> re2._Regexp:
    """The compiled pattern, or ValueError saying why it is refused."""
    if len(pattern) > PATTERN_LIMIT:
        raise ValueError(f"MATCHES pattern is over {PATTERN_LIMIT} characters")
    try:
        return _compiled(pattern)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", errors="replace")
        raise ValueError(
            f"regex {pattern!r} is not one RE2 can run ({reason}); MATCHES uses RE2 syntax, which "
            "matches in linear time and has no backreferences or lookaround"
        ) from None


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` (one compile_pattern accepted) matches anywhere in the first
    MATCH_INPUT_LIMIT characters of `text`."""
    return _compiled(pattern).search(text[:MATCH_INPUT_LIMIT]) is not None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re2._Regexp:
    options = re2.Options()
    options.max_mem = PATTERN_MEMORY
    options.log_errors = False  # the reason goes to the tenant in the 422, not to stderr
    return re2.compile(pattern, options)
