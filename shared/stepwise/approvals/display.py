"""How an approval request reads to a human, shared by the page, the email and the Slack message.

The arguments a human approves were written by a model, and a model can be steered by whatever text it
read (prompt injection). So they are shown as JSON with every invisible or direction-changing character
written as a visible `\\uXXXX` escape: a right-to-left override or Unicode tag characters cannot make
`rm -rf /` read as something harmless, or smuggle text that the human never sees.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

# Controls, format characters (bidi overrides, zero-width joiners, tag characters), private use,
# surrogates and line/paragraph separators: characters that render as nothing or rearrange the text.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp"})
# Variation selectors 17-256 (Mn, not Cf) carry no glyph and are used to hide data in text.
_VARIATION_SELECTORS_SUPPLEMENT = range(0xE0100, 0xE01F0)
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
TRUNCATION_MARK = "…"


def reveal_hidden(text: str) -> str:
    """`text` with each invisible or reordering character replaced by its JSON escape (`\\u202e`).

    The escapes are valid inside JSON strings, so JSON stays JSON. Newlines and tabs are kept.
    """
    return "".join(_escape(char) if _is_hidden(char) else char for char in text)


def _is_hidden(char: str) -> bool:
    if char in "\n\t":
        return False
    return unicodedata.category(char) in _HIDDEN_CATEGORIES or ord(char) in _VARIATION_SELECTORS_SUPPLEMENT


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # beyond the BMP JSON writes a UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def pretty_arguments(arguments: Mapping[str, Any]) -> str:
    """The tool arguments as indented JSON, in the order the model wrote them, hidden characters revealed."""
    text = json.dumps(arguments, indent=2, ensure_ascii=False, default=str)
    return reveal_hidden(text)


def deadline_text(expires_at: datetime) -> str:
    """`Fri 14 Mar 2025, 09:30 UTC`: unambiguous for approvers in any time zone, whatever the locale."""
    moment = as_utc(expires_at)
    return (
        f"{_WEEKDAYS[moment.weekday()]} {moment.day} {_MONTHS[moment.month - 1]} {moment.year}, "
        f"{moment:%H:%M} UTC"
    )


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive datetime is refused because its zone would be a guess."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("a timezone-aware datetime is required")
    return moment.astimezone(UTC)


def truncate(
    text: str, limit: int, *, mark: str = TRUNCATION_MARK, measure: Callable[[str], int] = len
) -> str:
    """`text` cut so that it and `mark` fit in `limit` (as `measure` counts), or `text` when it fits."""
    if measure(text) <= limit:
        return text
    budget = limit - measure(mark)
    if budget < 0:
        raise ValueError(f"the truncation mark alone is longer than {limit}")
    kept: list[str] = []
    used = 0
    for char in text:
        size = measure(char)
        if used + size > budget:
            break
        kept.append(char)
        used += size
    return "".join(kept) + mark


def require_web_url(url: str) -> str:
    """`url` if it is http(s): a link a human clicks must never be `javascript:` or `data:`."""
    if not url.lower().startswith(("https://", "http://")):
        raise ValueError(f"not an http(s) URL: {url[:40]!r}")
    return url
