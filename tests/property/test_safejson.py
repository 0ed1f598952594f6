"""stepwise.core.safejson against generated documents: what json.loads reads, loads reads the same when
it nests within the cap; deeper is TooDeep (a ValueError), never a RecursionError, however deep; and
check_depth measures exactly the nesting a recursive count gives."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stepwise.core import safejson

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=20,
)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


@given(JSON, st.integers(0, 12))
def test_a_document_within_the_cap_reads_as_json_reads_it_and_deeper_is_too_deep(
    value: Any, cap: int
) -> None:
    text = json.dumps(value)
    if depth(value) <= cap:
        assert safejson.loads(text, max_depth=cap) == json.loads(text)
        assert safejson.check_depth(value, max_depth=cap) is value
    else:
        with pytest.raises(safejson.TooDeep):
            safejson.loads(text, max_depth=cap)


@given(st.integers(1, 200_000), st.sampled_from(["[", '{"a":']), st.booleans())
def test_any_nesting_is_a_value_error_never_a_recursion_error(levels: int, opener: str, closed: bool) -> None:
    closer = "]" if opener == "[" else "}"
    text = opener * levels + ("1" + closer * levels if closed else "")
    try:
        value = safejson.loads(text)
    except ValueError:  # TooDeep, or not JSON at all when unclosed
        return
    assert levels <= safejson.MAX_DEPTH and depth(value) == levels


@given(st.one_of(st.text(max_size=50), JSON.map(json.dumps)))
def test_any_text_reads_as_json_reads_it_or_is_a_value_error(text: str) -> None:
    try:
        expected: Any = json.loads(text)
    except ValueError:
        expected = ValueError
    try:
        got: Any = safejson.loads(text)
    except safejson.TooDeep:
        got = safejson.TooDeep
    except ValueError:
        got = ValueError
    if got is safejson.TooDeep:
        assert expected is not ValueError and depth(expected) > safejson.MAX_DEPTH
    else:
        assert got == expected
