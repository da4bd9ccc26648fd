"""JSON schemas as the grammar engine gets them: shape checks, closed objects, output style."""

from __future__ import annotations

import copy
from typing import Any

from engine.structured.errors import SchemaError

# Compact, single-line JSON with the separators the chat template itself writes
# (`{"name": ..., "arguments": ...}`): no free whitespace, so a weak model cannot
# spend its whole max_tokens on blanks between tokens.
OUTPUT_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

# Keywords whose values are schemas / maps of schemas / lists of schemas; closing objects
# walks exactly these (walking every dict would mistake property *names* for keywords).
_SCHEMA_VALUED = (
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
)
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def prepare_schema(schema: Any, *, param: str) -> dict:
    """A copy of `schema` ready for compilation, or SchemaError naming `param`.

    An object schema that lists its properties and does not say otherwise admits no
    others (as OpenAI's strict mode requires, and as xgrammar's default strict mode
    does): every answer still validates against the schema as given, and a weak model
    cannot wander into an endless run of invented keys. Schemas that do want extra
    keys say so with `additionalProperties`.
    """
    if not isinstance(schema, dict):
        raise SchemaError(f"{param} must be a JSON schema object, got {type(schema).__name__}", param)
    prepared = copy.deepcopy(schema)
    _close_objects(prepared)
    style = dict(OUTPUT_STYLE)
    given = prepared.get("x-guidance")
    if given is not None and not isinstance(given, dict):
        raise SchemaError(f"{param}: x-guidance must be an object", param)
    prepared["x-guidance"] = {**(given or {}), **style}
    return prepared


def _close_objects(schema: Any) -> None:
    if not isinstance(schema, dict):
        return
    # Only a schema that lists its keys is closed: `{"type": "object"}` alone means any object.
    is_object = isinstance(schema.get("properties"), dict)
    listed = schema.get("properties") if is_object else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    # A required key the properties do not list is an extra key the schema asks for: leave it open.
    if (
        is_object
        and "additionalProperties" not in schema
        and "patternProperties" not in schema
        and all(name in listed for name in required)
    ):
        schema["additionalProperties"] = False
    for key in _SCHEMA_VALUED:
        _close_objects(schema.get(key))
    for key in _SCHEMA_MAPS:
        value = schema.get(key)
        if isinstance(value, dict):
            for sub in value.values():
                _close_objects(sub)
    for key in _SCHEMA_LISTS:
        value = schema.get(key)
        if isinstance(value, list):
            for sub in value:
                _close_objects(sub)


# A tool declared without `parameters` takes none (OpenAI: "an empty parameter list").
NO_PARAMETERS: dict = {"type": "object", "properties": {}, "additionalProperties": False}
