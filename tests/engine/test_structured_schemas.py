"""engine/structured/schemas.py without a grammar engine: which objects get closed (and
which stay open), every keyword the walk follows, the output style and its refusals."""

from __future__ import annotations

import pytest

from engine.structured.errors import SchemaError
from engine.structured.schemas import NO_PARAMETERS, OUTPUT_STYLE, prepare_schema

OBJ = {"properties": {"a": {"type": "string"}}}
CLOSED = {"properties": {"a": {"type": "string"}}, "additionalProperties": False}


def _prep(schema):
    prepared = prepare_schema(schema, param="p")
    prepared.pop("x-guidance")
    return prepared


def test_an_object_listing_its_keys_is_closed_and_the_given_schema_untouched():
    given = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    assert _prep(given) == {**given, "additionalProperties": False}
    assert "additionalProperties" not in given


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {"properties": ["a"]},
        {"properties": {"a": {}}, "additionalProperties": True},
        {"properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
        {"properties": {"a": {}}, "patternProperties": {"^x": {}}},
        {"properties": {"a": {}}, "required": ["a", "b"]},
    ],
    ids=["no-properties", "properties-not-a-map", "open", "typed-extra", "patterns", "required-unlisted"],
)
def test_objects_left_open(schema):
    assert _prep(schema).get("additionalProperties") == schema.get("additionalProperties")


def test_required_not_a_list_is_ignored():
    assert _prep({"properties": {"a": {}}, "required": "b"})["additionalProperties"] is False
    assert _prep({"properties": {}, "required": []})["additionalProperties"] is False


@pytest.mark.parametrize(
    "key",
    [
        "items",
        "additionalProperties",
        "contains",
        "not",
        "propertyNames",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
        "additionalItems",
    ],
)
def test_each_schema_valued_keyword_is_walked(key):
    assert _prep({key: OBJ})[key] == CLOSED


@pytest.mark.parametrize("key", ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"])
def test_each_map_of_schemas_is_walked(key):
    assert _prep({key: {"x": OBJ, "y": 3}})[key] == {"x": CLOSED, "y": 3}


@pytest.mark.parametrize("key", ["anyOf", "oneOf", "allOf", "prefixItems"])
def test_each_list_of_schemas_is_walked(key):
    assert _prep({key: [OBJ, True, OBJ]})[key] == [CLOSED, True, CLOSED]


def test_a_property_named_like_a_keyword_is_not_taken_for_one():
    schema = {"properties": {"items": {"type": "string"}, "not": {"type": "integer"}}}
    assert _prep(schema)["properties"] == schema["properties"]


def test_keywords_that_are_not_schemas_are_passed_over():
    schema = {"items": [OBJ], "properties": ["x"], "anyOf": OBJ}
    assert _prep(schema) == schema


def test_deep_nesting_is_closed_at_every_level():
    schema = {"type": "array", "items": {"properties": {"b": {"anyOf": [{"properties": {"c": {}}}]}}}}
    prepared = _prep(schema)
    inner = prepared["items"]
    assert inner["additionalProperties"] is False
    assert inner["properties"]["b"]["anyOf"][0] == {"properties": {"c": {}}, "additionalProperties": False}


def test_output_style_overrides_the_schemas_own_guidance_and_keeps_the_rest():
    assert OUTPUT_STYLE == {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    prepared = prepare_schema({"x-guidance": {"whitespace_flexible": True, "lenient": True}}, param="p")
    assert prepared["x-guidance"] == {"lenient": True, **OUTPUT_STYLE}
    assert prepare_schema({}, param="p") == {"x-guidance": OUTPUT_STYLE}
    assert prepare_schema({"x-guidance": None}, param="p") == {"x-guidance": OUTPUT_STYLE}


def test_refusals_name_the_field():
    with pytest.raises(SchemaError) as info:
        prepare_schema(["a"], param="tools[1].function.parameters")
    assert info.value.param == "tools[1].function.parameters"
    assert info.value.message == "tools[1].function.parameters must be a JSON schema object, got list"
    with pytest.raises(SchemaError) as info:
        prepare_schema({"x-guidance": "loose"}, param="response_format")
    assert (info.value.param, info.value.message) == (
        "response_format",
        "response_format: x-guidance must be an object",
    )


def test_no_parameters_is_a_closed_empty_object():
    assert NO_PARAMETERS == {"type": "object", "properties": {}, "additionalProperties": False}


def test_nested_objects_of_the_given_schema_are_left_untouched():
    given = {"type": "array", "items": {"properties": {"a": {"type": "string"}}}}
    prepared = _prep(given)
    assert prepared["items"]["additionalProperties"] is False
    assert given == {"type": "array", "items": {"properties": {"a": {"type": "string"}}}}
