"""Request bodies for the fuzz suite: valid ones generated from OpenAI's own request
schemas (the vendored OpenAPI excerpt in tests/fuzz/openai_openapi/), and the ways a
hostile client bends them: a wrong type at any path, nesting hundreds of levels deep,
huge values, unknown fields, a required field removed.

A body comes back as the bytes to send (`Hostile.raw`): deep nesting is spliced into
the JSON text, since no encoder writes 1,000 levels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

SPEC = json.loads((Path(__file__).parent / "openai_openapi" / "schemas.json").read_text())
SCHEMAS: dict[str, Any] = SPEC["components"]["schemas"]

# How many $ref hops a generated body follows before it stops expanding (the schemas
# are recursive: filters, JSON values, input items).
MAX_REF_DEPTH = 6
SMALL = 3  # the most items, keys and characters a generated container holds

INT64 = 2**63 - 1
JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=SMALL)
ANY_JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=SMALL) | st.dictionaries(st.text(max_size=SMALL), inner, max_size=SMALL),
    max_leaves=6,
)

# A value of each JSON type, and a few edge values, to put where something else belongs.
WRONG_VALUES: list[Any] = [
    None,
    True,
    0,
    -7,
    1.5,
    1e308,
    2**64,
    "",
    "x",
    [],
    [1],
    [None],
    [[]],
    [{}],
    {},
    {"x": 1},
    {"": None},
]
# Nesting depths: legal, just past the gateway's limit, past orjson's encoder (254),
# at and past its decoder's (1024).
DEEP_LEVELS = [8, 63, 66, 253, 256, 1023, 1100]
DEEP_MARK = "\u0000deep\u0000"


class Hostile:
    """One body to send, and how it was made (shown, shortened, when a check fails)."""

    __slots__ = ("how", "raw")

    def __init__(self, raw: bytes, how: str) -> None:
        self.raw = raw
        self.how = how

    def __repr__(self) -> str:
        head = self.raw[:300].decode("utf-8", "replace")
        return f"Hostile({self.how}, {len(self.raw)} bytes: {head!r})"


# One rich valid body per API: most fields the gateway reads, at once. Bodies drawn
# from the schemas are mostly turned away early (a field this gateway does not
# support); these reach every reader, so a wrong value at any of their paths is
# judged by the code that reads it.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "d",
            "strict": True,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
RICH = {
    "CreateChatCompletionRequest": {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "developer", "content": [{"type": "text", "text": "d"}]},
            {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "u"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        "temperature": 0.5,
        "top_p": 0.9,
        "n": 2,
        "stop": ["a", "b"],
        "max_completion_tokens": 10,
        "max_tokens": 12,
        "seed": 3,
        "logit_bias": {"1": 2},
        "logprobs": True,
        "top_logprobs": 2,
        "stream": True,
        "stream_options": {"include_usage": True},
        "presence_penalty": 0.1,
        "frequency_penalty": 0.1,
        "user": "u",
        "metadata": {"a": "b"},
        "top_k": 3,
        "min_tokens": 1,
        "stop_token_ids": [1],
        "vendor_field": {"a": [1, {"b": 2}]},
    },
    "CreateCompletionRequest": {
        "prompt": ["a", "b"],
        "max_tokens": 5,
        "n": 2,
        "best_of": 2,
        "logprobs": 2,
        "echo": True,
        "stop": "x",
        "temperature": 1,
        "logit_bias": {"5": -1},
        "seed": 1,
        "user": "u",
        "vendor_field": {"a": [1]},
    },
    "CreateResponse": {
        "input": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        ],
        "instructions": "i",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": False}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        "temperature": 0.5,
        "top_p": 0.9,
        "max_output_tokens": 32,
        "metadata": {"a": "b"},
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 2,
        "store": False,
        "stream": True,
    },
}


def request_body(schema_name: str, model: str) -> st.SearchStrategy[dict[str, Any]]:
    """A body valid under the named schema, for `model`."""
    return _strategy(SCHEMAS[schema_name], 0).filter(lambda b: isinstance(b, dict)).map(lambda b: {**b, "model": model})


def hostile_body(schema_name: str, model: str) -> st.SearchStrategy[Hostile]:
    """A body from the schema or the rich one, bent one of the ways a hostile client would."""
    rich = st.just({**RICH[schema_name], "model": model})
    return _hostile(st.one_of(request_body(schema_name, model), rich))


def wrong_type_sweep(schema_name: str, model: str):
    """Every path of the rich body, and the body itself, with every value of
    WRONG_VALUES put there: (what was done, the bytes)."""
    body = {**RICH[schema_name], "model": model}
    for path in [(), *_paths(body)]:
        for value in WRONG_VALUES:
            yield f"{_show(path)}={value!r}", _dumps(_replace(body, path, value))


@st.composite
def _hostile(draw, bodies: st.SearchStrategy[dict[str, Any]]) -> Hostile:
    body = draw(bodies)
    how = draw(st.sampled_from(["valid", "wrong_type", "deep", "huge", "unknown_field", "missing"]))
    if how == "valid":
        return Hostile(_dumps(body), how)
    paths = list(_paths(body))
    path = draw(st.sampled_from(paths)) if paths else ()
    if how == "wrong_type":
        value = draw(st.sampled_from(WRONG_VALUES))
        return Hostile(_dumps(_replace(body, path, value)), f"{how} {_show(path)}={value!r}")
    if how == "deep":
        levels = draw(st.sampled_from(DEEP_LEVELS))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        nest = opener * levels + "1" + closer * levels
        raw = _dumps(_replace(body, path, DEEP_MARK)).replace(json.dumps(DEEP_MARK).encode(), nest.encode(), 1)
        return Hostile(raw, f"{how} {_show(path)} {levels}x{opener}")
    if how == "huge":
        value = draw(
            st.sampled_from(["s" * 300_000, list(range(30_000)), {f"k{i}": i for i in range(5_000)}, -1e308, 2**63])
        )
        return Hostile(_dumps(_replace(body, path, value)), f"{how} {_show(path)} {type(value).__name__}")
    if how == "unknown_field":
        dicts = [p for p in [(), *paths] if isinstance(_get(body, p), dict)]
        where = draw(st.sampled_from(dicts))
        key = draw(st.text(min_size=1, max_size=12))
        value = draw(ANY_JSON)
        return Hostile(_dumps(_replace(body, (*where, key), value)), f"{how} {_show((*where, key))}")
    removable = [p for p in paths if p and isinstance(_get(body, p[:-1]), dict)]
    if not removable:
        return Hostile(_dumps(body), "valid")
    gone = draw(st.sampled_from(removable))
    return Hostile(_dumps(_remove(body, gone)), f"{how} {_show(gone)}")


# ---- schema -> strategy ---------------------------------------------------------------

_memo: dict[tuple[int, int], st.SearchStrategy[Any]] = {}


def _strategy(schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    key = (id(schema), depth)
    if key not in _memo:
        _memo[key] = _build(schema, depth)
    return _memo[key]


def _build(schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    if "$ref" in schema or "$recursiveRef" in schema:
        if depth >= MAX_REF_DEPTH:
            return st.none()
        # The one $recursiveRef in these schemas is CompoundFilter's, to itself.
        name = schema["$ref"].rsplit("/", 1)[1] if "$ref" in schema else "CompoundFilter"
        return _strategy(SCHEMAS[name], depth + 1)
    base = _typed(schema, depth)
    return base | st.none() if schema.get("nullable") else base


def _typed(schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "allOf" in schema:
        return st.tuples(*(_strategy(s, depth) for s in schema["allOf"])).map(_merge)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([_strategy(s, depth) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_typed({**schema, "type": k}, depth) for k in kind])
    if kind is None and "properties" in schema:
        kind = "object"
    if kind == "string":
        low = min(schema.get("minLength", 0), SMALL)
        return st.text(min_size=low, max_size=max(low, min(schema.get("maxLength", SMALL), SMALL)))
    if kind == "integer":
        return st.integers(_int_bound(schema.get("minimum"), -INT64), _int_bound(schema.get("maximum"), INT64))
    if kind == "number":
        return st.floats(schema.get("minimum", -1e6), schema.get("maximum", 1e6), allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = _strategy(schema.get("items", {}), depth)
        low = schema.get("minItems", 0)
        return st.lists(items, min_size=low, max_size=max(low, min(schema.get("maxItems", SMALL), SMALL)))
    if kind == "object":
        return _object(schema, depth)
    return ANY_JSON


def _object(schema: dict[str, Any], depth: int) -> st.SearchStrategy[dict[str, Any]]:
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    if props:
        return st.fixed_dictionaries(
            {k: _strategy(v, depth) for k, v in props.items() if k in required},
            optional={k: _strategy(v, depth) for k, v in props.items() if k not in required},
        )
    extra = schema.get("additionalProperties")
    values = _strategy(extra, depth) if isinstance(extra, dict) else ANY_JSON
    return st.dictionaries(st.text(min_size=1, max_size=SMALL), values, max_size=SMALL)


def _int_bound(bound: float | None, default: int) -> int:
    # The spec writes int64's bounds as floats (9223372036854776000).
    return default if bound is None else max(-INT64, min(INT64, int(bound)))


def _merge(parts: tuple[Any, ...]) -> Any:
    merged: dict[str, Any] = {}
    for part in parts:
        if isinstance(part, dict):
            merged.update(part)
    return merged


# ---- paths inside a body ----------------------------------------------------------------


def _paths(value: Any, prefix: tuple = ()):
    """Every path to a value inside `value` (keys and list indexes), outermost first."""
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield (*prefix, key)
        yield from _paths(child, (*prefix, key))


def _get(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    key, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, key: _replace(value.get(key), rest, new)}
    copy = list(value)
    copy[key] = _replace(copy[key], rest, new)
    return copy


def _remove(value: Any, path: tuple) -> Any:
    if len(path) == 1:
        return {k: v for k, v in value.items() if k != path[0]}
    key = path[0]
    if isinstance(value, dict):
        return {**value, key: _remove(value[key], path[1:])}
    copy = list(value)
    copy[key] = _remove(copy[key], path[1:])
    return copy


def _show(path: tuple) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path) or "(body)"


def _dumps(body: Any) -> bytes:
    return json.dumps(body).encode()
