"""Every builtin's arguments are a pydantic model, its schema is derived from it, and the registry checks
the model's arguments once, before `run`: the schema the model was sent decides, with its messages, and
`run` gets the typed model."""

from __future__ import annotations

import json
import typing
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from stepwise.llm.fake_args import example_arguments
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import catalog, http_request, input_schema, memory_save, memory_search, web_scrape
from stepwise.tools.registry import builtin_arguments

MODULES = [catalog.load(name) for name in sorted({**catalog.BUILTINS, **catalog.IMPLIED})]


def walk(node: Any) -> typing.Iterator[dict[str, Any]]:
    """Every schema object under `node` (property names are keys of `properties`, not schemas)."""
    if isinstance(node, dict):
        yield node
        for key, value in node.items():
            children = value.values() if key == "properties" else [value]
            for child in children:
                yield from walk(child)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


@pytest.mark.parametrize("tool", MODULES, ids=lambda m: m.NAME)
def test_each_builtin_sends_the_schema_of_its_arguments_model(tool: ModuleType) -> None:
    assert issubclass(tool.Arguments, BaseModel)
    assert input_schema(tool.Arguments) == tool.INPUT_SCHEMA
    assert list(tool.INPUT_SCHEMA["properties"]) == list(tool.Arguments.model_fields)
    assert tool.Arguments.model_config.get("extra") == "forbid"
    assert tool.INPUT_SCHEMA["additionalProperties"] is False
    # What only the code reads stays out of the prompt.
    assert all("title" not in node and node.get("type") != "null" for node in walk(tool.INPUT_SCHEMA))
    assert "$defs" not in json.dumps(tool.INPUT_SCHEMA)


@pytest.mark.parametrize("tool", MODULES, ids=lambda m: m.NAME)
def test_run_is_typed_with_the_model_the_registry_builds(tool: ModuleType) -> None:
    assert typing.get_type_hints(tool.run)["arguments"] is tool.Arguments

    parsed = builtin_arguments(tool, example_arguments(tool.INPUT_SCHEMA))

    assert isinstance(parsed, tool.Arguments)


class Nested(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str


class Sample(BaseModel):
    """Only for the code: not part of the schema."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="What to look for.")
    limit: int = Field(5, ge=1, le=10)
    tags: list[str] | None = Field(None, max_length=3, description="Keywords.")
    body: str | dict[str, Any] | None = None


def test_the_schema_shows_optional_arguments_as_their_type_without_titles() -> None:
    assert input_schema(Sample) == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to look for."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "description": "Keywords."},
            "body": {"anyOf": [{"type": "string"}, {"type": "object"}]},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def test_arguments_with_a_nested_model_are_refused() -> None:
    class WithNested(BaseModel):
        inner: Nested

    with pytest.raises(TypeError, match="flat"):
        input_schema(WithNested)


def failure_of(tool: ModuleType, arguments: Any) -> tuple[str, str]:
    parsed = builtin_arguments(tool, arguments)
    assert isinstance(parsed, ToolResult) and parsed.error is not None, f"expected a failure, got {parsed!r}"
    return parsed.error.code, parsed.error.message


def test_arguments_that_are_not_an_object_are_refused() -> None:
    assert failure_of(memory_search, ["q"]) == ("invalid_arguments", "(arguments): must be an object")


def test_the_schema_decides_so_nothing_it_refuses_is_coerced() -> None:
    # pydantic alone would read "5" as 5 and 1 as True; the model was told integer and boolean.
    assert failure_of(memory_search, {"query": "x", "top_k": "5"}) == (
        "invalid_arguments",
        "top_k: '5' is not of type 'integer'",
    )
    assert failure_of(web_scrape, {"url": "https://x.example", "include_images": 1}) == (
        "invalid_arguments",
        "include_images: 1 is not of type 'boolean'",
    )


def test_what_the_schema_accepts_reaches_run_typed_with_its_defaults() -> None:
    parsed = builtin_arguments(memory_search, {"query": "tea", "top_k": 3.0})

    assert isinstance(parsed, memory_search.Arguments)
    assert parsed.top_k == 3 and type(parsed.top_k) is int
    defaults = builtin_arguments(web_scrape, {"url": "https://x.example"})
    assert isinstance(defaults, web_scrape.Arguments)
    assert (defaults.formats, defaults.include_images) == (["markdown"], False)


def test_what_the_model_refuses_past_the_schema_is_an_argument_error_too() -> None:
    # A lone surrogate is a JSON string, but not text a length limit can count.
    code, message = failure_of(memory_save, {"content": "tea \ud800"})

    assert code == "invalid_arguments"
    assert message.startswith("content: ")


def test_a_tool_may_forgive_a_spelling_before_the_schema_is_checked() -> None:
    parsed = builtin_arguments(http_request, {"method": "post", "url": "https://x.example"})

    assert isinstance(parsed, http_request.Arguments) and parsed.method == "POST"
    assert failure_of(http_request, {"method": "trace", "url": "https://x.example"})[1].startswith(
        "method: 'TRACE' is not one of"
    )
