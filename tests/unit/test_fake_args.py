"""example_arguments: whatever the schema, the arguments validate against it."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import FormatChecker
from jsonschema.validators import validator_for

from stepwise.llm.fake_args import example_arguments


def obj(properties: dict[str, Any], *required: str, **more: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), **more}


SCHEMAS: dict[str, dict[str, Any]] = {
    "empty": {"type": "object"},
    "no_type": {"properties": {"q": {"type": "string"}}, "required": ["q"]},
    "strings": obj(
        {
            "plain": {"type": "string"},
            "short": {"type": "string", "minLength": 12, "maxLength": 14},
            "tiny": {"type": "string", "maxLength": 3},
            "enum": {"type": "string", "enum": ["b", "a"]},
            "const": {"const": "fixed"},
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "mail": {"type": "string", "format": "email"},
            "link": {"type": "string", "format": "uri"},
            "id": {"type": "string", "format": "uuid"},
            "ip": {"type": "string", "format": "ipv4"},
        },
        "plain",
        "short",
        "tiny",
        "enum",
        "const",
        "when",
        "day",
        "mail",
        "link",
        "id",
        "ip",
    ),
    "patterns": obj(
        {
            "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "iso_date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
            "slug": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "minLength": 5},
            "choice": {"type": "string", "pattern": "^(red|green|blue)$"},
            "not_vowel": {"type": "string", "pattern": "^[^aeiou]{2,}$"},
            "ticket": {"type": "string", "pattern": r"^[A-Z]+-\d+$"},
            "host": {"type": "string", "pattern": r"^(?:[a-z0-9-]+\.)+com$"},
        },
        "currency",
        "iso_date",
        "slug",
        "choice",
        "not_vowel",
        "ticket",
        "host",
    ),
    "numbers": obj(
        {
            "count": {"type": "integer"},
            "big": {"type": "integer", "minimum": 10, "maximum": 20},
            "negative": {"type": "integer", "maximum": -5},
            "open": {"type": "integer", "exclusiveMinimum": 3},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "step": {"type": "integer", "minimum": 7, "multipleOf": 5},
            "price": {"type": "number", "minimum": 0.5, "maximum": 0.75},
            "draft4": {"type": "number", "minimum": 2, "exclusiveMinimum": True},
            "flag": {"type": "boolean"},
            "nothing": {"type": "null"},
        },
        "count",
        "big",
        "negative",
        "open",
        "ratio",
        "step",
        "price",
        "draft4",
        "flag",
        "nothing",
    ),
    "arrays": obj(
        {
            "tags": {"type": "array", "items": {"type": "string"}},
            "three": {
                "type": "array",
                "items": {"type": "integer", "maximum": 2},
                "minItems": 3,
                "uniqueItems": True,
            },
            "colors": {"type": "array", "items": {"enum": ["r", "g"]}, "minItems": 2, "uniqueItems": True},
            "none": {"type": "array", "items": {"type": "string"}, "maxItems": 0},
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "items": False,
            },
            "rows": {"type": "array", "items": obj({"k": {"type": "string"}}, "k"), "minItems": 1},
        },
        "tags",
        "three",
        "colors",
        "none",
        "pair",
        "rows",
    ),
    "nested": obj(
        {
            "filter": obj(
                {
                    "field": {"type": "string"},
                    "range": obj({"lo": {"type": "number"}, "hi": {"type": "number"}}, "lo"),
                },
                "field",
                "range",
                additionalProperties=False,
            ),
            "meta": {"type": "object", "additionalProperties": {"type": "integer"}, "required": ["n"]},
        },
        "filter",
        "meta",
    ),
    "unions": obj(
        {
            "any": {"anyOf": [{"type": "integer", "minimum": 5}, {"type": "string"}]},
            "one": {"oneOf": [{"type": "string"}, {"type": "string", "enum": ["x"]}, {"type": "integer"}]},
            "nullable": {"type": ["string", "null"], "format": "email"},
            "all": {"allOf": [obj({"a": {"type": "string"}}, "a"), obj({"b": {"type": "integer"}}, "b")]},
        },
        "any",
        "one",
        "nullable",
        "all",
    ),
    "given_values": obj(
        {
            "limit": {"type": "integer", "default": 25, "maximum": 100},
            "lang": {"type": "string", "examples": ["en", "fr"]},
            "bad_default": {"type": "integer", "minimum": 10, "default": 3},
        },
        "limit",
        "lang",
        "bad_default",
    ),
    "refs": {
        "type": "object",
        "$defs": {"point": obj({"x": {"type": "number"}, "y": {"type": "number"}}, "x", "y")},
        "properties": {
            "at": {"$ref": "#/$defs/point"},
            "path": {"type": "array", "items": {"$ref": "#/$defs/point"}},
        },
        "required": ["at", "path"],
    },
    "min_properties": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "minProperties": 2,
    },
    "builtin_http_request": obj(
        {
            "method": {"type": "string", "enum": ["GET", "POST", "PUT", "PATCH", "DELETE"]},
            "url": {"type": "string", "format": "uri"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {},
        },
        "method",
        "url",
    ),
}


@pytest.mark.parametrize("name", SCHEMAS)
def test_example_arguments_validate_against_their_schema(name: str) -> None:
    schema = SCHEMAS[name]
    validator = validator_for(schema)(schema, format_checker=FormatChecker())

    arguments = example_arguments(schema)

    assert isinstance(arguments, dict)
    assert list(validator.iter_errors(arguments)) == []


@pytest.mark.parametrize("name", SCHEMAS)
def test_example_arguments_are_deterministic(name: str) -> None:
    assert example_arguments(SCHEMAS[name]) == example_arguments(SCHEMAS[name])


def test_required_properties_are_all_present() -> None:
    for schema in SCHEMAS.values():
        assert set(schema.get("required", [])) <= set(example_arguments(schema))


def test_given_values_are_preferred_when_they_validate() -> None:
    arguments = example_arguments(SCHEMAS["given_values"])

    assert arguments["limit"] == 25
    assert arguments["lang"] == "en"
    assert arguments["bad_default"] == 10  # the default breaks `minimum`, so it is not used


def test_enum_takes_the_first_value() -> None:
    assert example_arguments(SCHEMAS["strings"])["enum"] == "b"


def test_a_non_object_schema_yields_an_empty_object() -> None:
    assert example_arguments({"type": "string"}) == {}
