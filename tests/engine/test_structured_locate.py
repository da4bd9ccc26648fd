"""engine/structured/locate.py with a scripted grammar engine (an `error_of` that
complains about a marker key): which sub-schemas are walked, the pointer's escaping,
the root's definitions and x-guidance carried into each, and the depth bound."""

from __future__ import annotations

import pytest

from engine.structured.errors import SchemaError
from engine.structured.locate import _MAX_DEPTH, locate_failure


def _marker_error(schema: dict) -> str:
    """What a grammar engine would say: the same words wherever the bad key sits."""

    def has(node) -> bool:
        if isinstance(node, dict):
            return "bad" in node or any(has(v) for v in node.values())
        if isinstance(node, list):
            return any(has(v) for v in node)
        return False

    return "Unimplemented keys: bad" if has(schema) else ""


def _where(schema: dict) -> str:
    return locate_failure(schema, _marker_error)


def test_no_error_is_the_root():
    assert _where({"type": "object"}) == ""


def test_an_error_of_the_root_itself_is_the_root():
    assert _where({"bad": 1, "properties": {"a": {"type": "string"}}}) == ""


@pytest.mark.parametrize(
    "key", ["items", "additionalProperties", "contains", "propertyNames", "not", "if", "then", "else"]
)
def test_each_child_schema_key_is_walked(key):
    assert _where({key: {"bad": 1}}) == f"/{key}"


@pytest.mark.parametrize("key", ["properties", "patternProperties", "$defs", "definitions"])
def test_each_child_map_is_walked(key):
    # every sub-schema is compiled with the root's definitions: only a top-level `bad` complains here
    def error_of(schema: dict) -> str:
        return "bad here" if "bad" in schema or "root" in schema else ""

    schema = {"root": 1, key: {"ok": {"type": "string"}, "x": {"bad": 1}}}
    assert locate_failure(schema, error_of) == f"/{key}/x"


@pytest.mark.parametrize("key", ["anyOf", "oneOf", "allOf", "prefixItems"])
def test_each_child_list_is_walked(key):
    assert _where({key: [{"type": "string"}, "not a schema", {"bad": 1}]}) == f"/{key}/2"


def test_non_schema_values_are_skipped():
    schema = {"items": [1], "properties": ["x"], "anyOf": {"bad": 1}, "not": "bad", "bad": 0}
    assert _where(schema) == ""
    assert _where({"properties": {"a": 1, "b": {"bad": 1}}}) == "/properties/b"


def test_the_deepest_failing_subschema_is_reported():
    schema = {"properties": {"a": {"items": {"anyOf": [{}, {"properties": {"z": {"bad": 1}}}]}}}}
    assert _where(schema) == "/properties/a/items/anyOf/1/properties/z"


def test_pointer_tokens_are_escaped():
    assert _where({"properties": {"a/b~c": {"bad": 1}}}) == "/properties/a~1b~0c"


def test_a_different_error_is_not_followed():
    def error_of(schema: dict) -> str:
        if "properties" in schema:
            return "root words"
        return "other words" if schema.get("type") == "x" else ""

    assert locate_failure({"properties": {"a": {"type": "x"}}}, error_of) == ""


def test_each_subschema_is_compiled_with_the_roots_definitions_and_guidance():
    seen: list[dict] = []
    root = {
        "$defs": {"n": {"type": "integer"}},
        "definitions": {"m": {"type": "string"}},
        "x-guidance": {"whitespace_flexible": False},
        "properties": {"a": {"$ref": "#/$defs/n"}},
    }

    def error_of(schema: dict) -> str:
        seen.append(schema)
        return "refers" if "$ref" in schema or "properties" in schema else ""

    assert locate_failure(root, error_of) == "/properties/a"
    standalone = seen[1]
    assert standalone == {
        "$defs": root["$defs"],
        "definitions": root["definitions"],
        "$ref": "#/$defs/n",
        "x-guidance": {"whitespace_flexible": False},
    }


def test_guidance_defaults_to_empty_and_non_dict_definitions_are_left_out():
    seen: list[dict] = []

    def error_of(schema: dict) -> str:
        seen.append(schema)
        return "e" if "bad" in schema or "items" in schema else ""

    locate_failure({"$defs": [1], "items": {"bad": 1}}, error_of)
    assert seen[1] == {"bad": 1, "x-guidance": {}}


def test_the_walk_stops_at_its_depth_bound():
    schema: dict = {"bad": 1}
    for _ in range(_MAX_DEPTH + 3):
        schema = {"items": schema}
    assert _MAX_DEPTH == 32
    assert _where(schema) == "/items" * _MAX_DEPTH


def test_schema_error_keeps_its_message_and_param():
    error = SchemaError("bad schema", "tools[2].function.parameters")
    assert isinstance(error, ValueError)
    assert (error.message, error.param, str(error)) == ("bad schema", "tools[2].function.parameters", "bad schema")
