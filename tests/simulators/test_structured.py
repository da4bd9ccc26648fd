"""The guided-decoding generators on their own: every document a schema, regex or
grammar yields is accepted by it (checked with the `jsonschema` library and `re`),
and the token pieces join back into the document."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from simulators.pattern_text import PatternError, grammar_text, matching_text
from simulators.schema_values import SchemaValues
from simulators.structured import ANY_OBJECT, Constraint, pieces

SCHEMAS = {
    "enum": {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["answer"],
        "additionalProperties": False,
    },
    "scalars": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 4, "maxLength": 6},
            "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{2}$"},
            "mail": {"type": "string", "format": "email"},
            "age": {"type": "integer", "minimum": 18, "maximum": 20},
            "even": {"type": "integer", "multipleOf": 2, "minimum": 1, "maximum": 9},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "ok": {"type": "boolean"},
            "nothing": {"type": "null"},
            "fixed": {"const": "Paris"},
        },
        "required": ["name", "code", "mail", "age", "even", "ratio", "ok", "nothing", "fixed"],
    },
    "arrays": {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c", "d"]}, "uniqueItems": True},
            "few": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        },
        "required": ["tags", "few", "pair"],
    },
    "nested_and_refs": {
        "type": "object",
        "properties": {
            "home": {"$ref": "#/$defs/address"},
            "work": {"$ref": "#/definitions/address"},
            "pick": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "either": {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "boolean"}]},
            "both": {"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"required": ["b"]}]},
        },
        "required": ["home", "work", "pick", "either", "both"],
        "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        "definitions": {"address": {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"]}},
    },
    "recursive": {
        "type": "object",
        "properties": {"label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["label"],
    },
    "nullable_list_type": {"type": ["string", "null"], "maxLength": 5},
    "any_object": ANY_OBJECT,
    "empty": {},
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_document_validates_against_its_schema(name: str) -> None:
    schema = SCHEMAS[name]
    seen = set()
    for seed in range(150):
        value = SchemaValues(schema, random.Random(seed)).value()
        jsonschema.validate(value, schema)
        seen.add(json.dumps(value, sort_keys=True))
    if name not in ("empty",):
        assert len(seen) > 1  # seeded differently, the documents differ


def test_optional_properties_come_and_go_required_ones_stay() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a"]}
    docs = [SchemaValues(schema, random.Random(seed)).value() for seed in range(40)]
    assert all("a" in d for d in docs)
    assert any("b" in d for d in docs) and any("b" not in d for d in docs)


def test_the_same_seed_gives_the_same_document() -> None:
    schema = SCHEMAS["scalars"]
    first = SchemaValues(schema, random.Random("k")).value()
    assert SchemaValues(schema, random.Random("k")).value() == first


@pytest.mark.parametrize(
    "pattern", [r"\d{3}-[A-Z]{2}", r"(yes|no)", r"[^abc]+x?", r"^\w+@\w+\.com$", r"(ab)\1", r"[a-f0-9]{8}"]
)
def test_regex_text_matches(pattern: str) -> None:
    for seed in range(30):
        assert re.fullmatch(pattern, matching_text(pattern, random.Random(seed)))


def test_regex_that_cannot_be_generated_from_is_refused() -> None:
    with pytest.raises(PatternError):
        matching_text("(", random.Random(0))
    with pytest.raises(PatternError):
        matching_text(r"a(?=b)", random.Random(0))  # a lookahead nothing generated satisfies


def test_grammar_text_follows_the_rules() -> None:
    grammar = 'root ::= item ("," item)*   # a list\nitem ::= "yes" | "no" | [0-9]+'
    item = r"(?:yes|no|[0-9]+)"
    outputs = {grammar_text(grammar, random.Random(seed)) for seed in range(30)}
    assert all(re.fullmatch(rf"{item}(?:,{item})*", text) for text in outputs) and len(outputs) > 3
    nested = 'expr ::= term ("+" term)*\nterm ::= "(" expr ")" | [0-9]'
    for seed in range(30):
        text = grammar_text(nested, random.Random(seed))
        assert text.count("(") == text.count(")") and re.fullmatch(r"[0-9()+]+", text)


@pytest.mark.parametrize("bad", ["root ::= foo", 'root = "x"', 'root ::= ("a"', ""])
def test_grammar_errors(bad: str) -> None:
    with pytest.raises(PatternError):
        grammar_text(bad, random.Random(0))


def test_constraint_documents_and_their_pieces() -> None:
    schema = SCHEMAS["enum"]
    spaced = Constraint("json", schema).document(random.Random(1))
    compact = Constraint("json", schema, compact=True).document(random.Random(1))
    assert spaced.replace(" ", "") == compact and ": " in spaced and ": " not in compact
    parts = pieces(spaced)
    assert "".join(parts) == spaced and len(parts) > 3 and all(len(p) <= 8 for p in parts)
    assert Constraint("choice", choices=("left", "right")).document(random.Random(0)) in ("left", "right")
