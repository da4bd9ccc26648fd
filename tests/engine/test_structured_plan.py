"""Planning a request's grammar: which requests get one, and the 400s for schemas we
cannot honour (each naming the field and the problem), plus the masks' basic shape."""

from __future__ import annotations

import json

import pytest
import torch

from engine.make_tiny import make_tiny
from engine.structured import GrammarMask, SchemaError, grammar_tokenizer, plan_structured
from engine.text.tokenizer import TextTokenizer
from tests.engine.structured_cases import TOOLS


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    return TextTokenizer(make_tiny(tmp_path_factory.mktemp("plan") / "tiny"))


@pytest.fixture(scope="module")
def lltok(tok: TextTokenizer):
    return grammar_tokenizer(tok, tok.vocab_size, set(tok.eos_token_ids))


def schema_format(schema, name: str = "thing") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"response_format": {"type": "text"}},
        {"tools": TOOLS, "tool_choice": "auto"},
        {"tools": TOOLS, "tool_choice": "none"},
        {"tools": TOOLS},
    ],
)
def test_free_text_requests_get_no_grammar(lltok, fields):
    assert plan_structured(lltok, **fields) is None


def test_forced_tool_calls_win_over_response_format(lltok):
    plan = plan_structured(lltok, response_format={"type": "json_object"}, tools=TOOLS, tool_choice="required")
    assert plan is not None and plan.kind == "tool_calls"


@pytest.mark.parametrize(
    "schema,param,words",
    [
        ({"type": "strin"}, "response_format", ["strin"]),
        ({"type": "object", "not": {"required": ["a"]}}, "response_format", ["not"]),
        ({"type": "array", "uniqueItems": True}, "response_format", ["uniqueItems"]),
        ({"if": {"type": "string"}, "then": {"maxLength": 3}}, "response_format", ["if", "then"]),
        ({"$ref": "#/$defs/missing"}, "response_format", ["/$defs/missing"]),
        ({"$ref": "http://example.com/schema.json"}, "response_format", ["http://example.com/schema.json"]),
        ({"type": "string", "pattern": "(unclosed"}, "response_format", ["unclosed group"]),
        ({"type": "integer", "minimum": 5, "maximum": 2}, "response_format", ["minimum", "maximum"]),
        ({"enum": []}, "response_format", ["Unsatisfiable"]),
        ([{"type": "object"}], "response_format.json_schema.schema", ["JSON schema object", "list"]),
    ],
)
def test_bad_or_unsupported_schemas_are_named(lltok, schema, param, words):
    with pytest.raises(SchemaError) as info:
        plan_structured(lltok, response_format=schema_format(schema, "thing"))
    assert info.value.param == param
    for word in words:
        assert word in info.value.message
    if param == "response_format":
        assert "'thing'" in info.value.message


@pytest.mark.parametrize(
    "schema,where",
    [
        (
            {
                "type": "object",
                "properties": {
                    "a/b": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"c": {"not": {"type": "string"}}}},
                    }
                },
            },
            "/properties/a~1b/items/properties/c",
        ),
        (
            {
                "type": "object",
                "properties": {"x": {"anyOf": [{"type": "string"}, {"type": "string", "pattern": "["}]}},
            },
            "/properties/x/anyOf/1",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/n"}},
                "$defs": {"n": {"type": "integer", "minimum": 3, "maximum": 1}},
            },
            "/properties/a",
        ),
    ],
)
def test_errors_point_at_the_failing_subschema(lltok, schema, where):
    with pytest.raises(SchemaError) as info:
        plan_structured(lltok, response_format=schema_format(schema))
    assert f" at {where}: " in info.value.message


def test_bad_tool_parameters_name_the_tool(lltok):
    tools = json.loads(json.dumps(TOOLS))
    tools[1]["function"]["parameters"]["properties"]["item"]["properties"]["qty"]["type"] = "int"
    with pytest.raises(SchemaError) as info:
        plan_structured(lltok, tools=tools, tool_choice="required")
    assert info.value.param == "tools[1].function.parameters"
    assert "place_order" in info.value.message and "int" in info.value.message


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": [], "tool_choice": "required"}, "tool_choice"),
        (
            {"tools": [{"type": "function", "function": {"parameters": {}}}], "tool_choice": "required"},
            "tools[0].function.name",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
    ],
)
def test_bad_requests_are_schema_errors(lltok, fields, param):
    with pytest.raises(SchemaError) as info:
        plan_structured(lltok, **fields)
    assert info.value.param == param


def allowed_text(mask: torch.Tensor, tok: TextTokenizer) -> set[bytes]:
    return {tok.token_bytes(i) for i in torch.nonzero(mask).flatten().tolist()}


def test_json_mask_starts_with_a_brace_and_ends_with_only_stop_tokens(tok, lltok):
    plan = plan_structured(
        lltok,
        response_format=schema_format(
            {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        ),
    )
    stops = set(tok.eos_token_ids)
    mask = GrammarMask(plan.matcher, tok.vocab_size, stops)
    first = allowed_text(mask([]), tok)
    assert first and all(b.startswith(b"{") for b in first)
    done = tok.encode('{"ok": true}', add_special_tokens=False)
    assert set(torch.nonzero(mask(done)).flatten().tolist()) == stops
    assert not mask.errors


def test_tool_call_mask_forces_the_hermes_tag_and_a_known_name(tok, lltok):
    plan = plan_structured(lltok, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "ping"}})
    mask = GrammarMask(plan.matcher, tok.vocab_size, set(tok.eos_token_ids))
    assert all(b"<tool_call>".startswith(b) or b.startswith(b"<tool_call>") for b in allowed_text(mask([]), tok))
    prefix = tok.encode('<tool_call>\n{"name": "', add_special_tokens=False)
    assert all(b"ping".startswith(b) for b in allowed_text(mask(prefix), tok))


def test_diverging_choices_keep_their_own_grammar_state(tok, lltok):
    """n>1 choices share one mask object; each line of output must get its own state."""
    plan = plan_structured(lltok, response_format=schema_format({"enum": ["alpha", "beta"]}))
    mask = GrammarMask(plan.matcher, tok.vocab_size, set(tok.eos_token_ids))
    a = tok.encode('"al', add_special_tokens=False)
    b = tok.encode('"be', add_special_tokens=False)
    mask.prefetch(a)
    mask.prefetch(b)
    after_a, after_b = allowed_text(mask(a), tok), allowed_text(mask(b), tok)
    assert after_a and all(b'pha"'.startswith(t) for t in after_a)
    assert after_b and all(b'ta"'.startswith(t) for t in after_b)
    assert not mask.errors


def test_objects_are_closed_unless_the_schema_asks_for_more(tok, lltok):
    """Unlisted keys are not generated, except where the schema allows or requires them."""

    def accepts(schema, text: str) -> bool:
        plan = plan_structured(lltok, response_format=schema_format(schema))
        matcher = plan.matcher.deep_copy()
        return matcher.consume_tokens(tok.encode(text, add_special_tokens=False)) and matcher.is_accepting()

    listed = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert accepts(listed, '{"a": 1}')
    assert not accepts(listed, '{"a": 1, "b": 2}')
    assert accepts({**listed, "additionalProperties": True}, '{"a": 1, "b": 2}')
    assert accepts({**listed, "required": ["b"]}, '{"a": 1, "b": 2}')


def test_masks_of_two_vocabularies_in_one_step(tok, lltok):
    """Two engines (models) in one process share the step batcher; each row keeps its size."""
    padded_lltok = grammar_tokenizer(tok, tok.vocab_size + 64, set(tok.eos_token_ids))  # padded logits rows
    fmt = schema_format({"type": "boolean"})
    small = GrammarMask(plan_structured(lltok, response_format=fmt).matcher, tok.vocab_size, set(tok.eos_token_ids))
    padded = GrammarMask(
        plan_structured(padded_lltok, response_format=fmt).matcher, tok.vocab_size + 64, set(tok.eos_token_ids)
    )
    small.prefetch([])
    padded.prefetch([])
    a, b = small([]), padded([])
    assert a.shape == (tok.vocab_size,) and b.shape == (tok.vocab_size + 64,)
    assert torch.equal(a, b[: tok.vocab_size]) and not b[tok.vocab_size :].any()


def test_tool_arguments_are_an_object_even_when_the_schema_leaves_the_type_open(tok, lltok):
    tools = [{"type": "function", "function": {"name": "anything", "parameters": {}}}]
    plan = plan_structured(lltok, tools=tools, tool_choice="required")
    head = '<tool_call>\n{"name": "anything", "arguments": '
    for arguments, ok in (("5", False), ('"x"', False), ('{"k": [1]}', True)):
        matcher = plan.matcher.deep_copy()
        text = head + arguments + "}\n</tool_call>"
        assert (matcher.consume_tokens(tok.encode(text, add_special_tokens=False)) and matcher.is_accepting()) == ok
