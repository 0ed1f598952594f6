"""The JSON depth cap: one helper, and the model's side of the loop that parses with it."""

from typing import Any

import pytest

from stepwise.core import safejson
from stepwise.llm.client import parse_arguments
from stepwise.loop.gating import _arguments
from stepwise.loop.model_call import _signature


def deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_value(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_a_document_at_the_cap_parses_and_one_level_more_does_not() -> None:
    assert safejson.loads(deep_text(safejson.MAX_DEPTH)) == deep_value(safejson.MAX_DEPTH)
    with pytest.raises(safejson.TooDeep):
        safejson.loads(deep_text(safejson.MAX_DEPTH + 1))


@pytest.mark.parametrize("depth", [5_000, 1_000_000])
def test_a_document_past_the_interpreters_stack_is_too_deep_not_a_recursion_error(depth: int) -> None:
    with pytest.raises(safejson.TooDeep) as raised:
        safejson.loads(deep_text(depth))
    assert isinstance(raised.value, ValueError)  # every `except ValueError` around a parse still holds


def test_check_depth_measures_a_value_too_deep_to_walk_recursively() -> None:
    with pytest.raises(safejson.TooDeep):
        safejson.check_depth(deep_value(100_000))
    assert safejson.check_depth({"a": [1, {"b": "c"}]}, max_depth=3) == {"a": [1, {"b": "c"}]}
    with pytest.raises(safejson.TooDeep):
        safejson.check_depth({"a": [1, {"b": "c"}]}, max_depth=2)


def test_scalars_and_invalid_json_behave_as_json_loads_does() -> None:
    assert safejson.loads("3") == 3
    with pytest.raises(ValueError) as raised:
        safejson.loads("{not json")
    assert not isinstance(raised.value, safejson.TooDeep)


@pytest.mark.parametrize("depth", [safejson.MAX_DEPTH + 1, 50_000])
def test_the_models_over_deep_arguments_are_an_error_the_model_reads_not_a_crash(depth: int) -> None:
    raw = '{"q": ' + deep_text(depth) + "}"
    assert parse_arguments(raw) == {"_raw": raw}  # handed back verbatim, for the step to refuse
    expected = f"arguments must be a JSON object nested at most {safejson.MAX_DEPTH} levels deep"
    assert _arguments(raw) == expected
    assert ":lookup:" in _signature("lookup", raw)  # the doom-loop check compares the text instead


def test_arguments_that_fit_are_parsed() -> None:
    assert parse_arguments('{"q": [[1]]}') == {"q": [[1]]}
    assert _arguments('{"q": [[1]]}') == {"q": [[1]]}
    assert _arguments("[1]") == "arguments must be a JSON object"
