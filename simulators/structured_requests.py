"""How each runtime's API asks for guided decoding, read into a `Constraint`
(docs/runtimes.md §6, "Structured output"). Each reader returns None for an
unconstrained request and raises `ConstraintRefused` with the runtime's own
words where the runtime refuses the request; the runtime module writes the
refusal in its error shape.

Not generated from (the output stays free text): `structural_tag` formats, and
grammars beyond the GBNF subset of `pattern_text` (those are refused).
"""

from __future__ import annotations

import json
from typing import Any

from simulators.pattern_text import PatternError
from simulators.structured import ANY_OBJECT, Constraint


class ConstraintRefused(ValueError):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def _checked(constraint: Constraint) -> Constraint:
    try:
        constraint.check()
    except PatternError as exc:
        raise ConstraintRefused(str(exc)) from exc
    return constraint


def _json_value(value: Any, what: str) -> Any:
    """A schema given as a JSON string (allowed by vLLM, SGLang, TGI) or as an object."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ConstraintRefused(f"{what} is not valid JSON: {exc}") from exc
    return value


# ---- vLLM: response_format, or structured_outputs ------------------------------------

VLLM_FORMATS = ("text", "json_object", "json_schema", "structural_tag")
VLLM_STRUCTURED_KEYS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def vllm_constraint(body: dict[str, Any]) -> Constraint | None:
    """`response_format` (`json_schema` with `json_schema.schema`, or `json_object`) or
    `structured_outputs` with exactly one of its constraints (`vllm/sampling_params.py`
    `StructuredOutputsParams`). The removed `guided_*` fields are ignored."""
    from_format = _vllm_response_format(body.get("response_format"))
    outputs = body.get("structured_outputs")
    if outputs is None:
        return from_format
    if not isinstance(outputs, dict):
        raise ConstraintRefused("structured_outputs: Input should be a valid dictionary", "structured_outputs")
    given = {k: outputs[k] for k in VLLM_STRUCTURED_KEYS if outputs.get(k) is not None}
    if len(given) + (from_format is not None) > 1:
        raise ConstraintRefused(
            f"You can only use one kind of structured outputs constraint but multiple are specified: {given}"
        )
    if not given:
        if from_format is not None:
            return from_format
        raise ConstraintRefused(
            f"You must use one kind of structured outputs constraint but none are specified: {outputs}"
        )
    key, value = next(iter(given.items()))
    if key == "json":
        return Constraint("json", _json_value(value, "structured_outputs.json"))
    if key == "json_object":
        return Constraint("json", ANY_OBJECT)
    if key == "regex":
        return _checked(Constraint("regex", pattern=str(value)))
    if key == "grammar":
        return _checked(Constraint("grammar", pattern=str(value)))
    if key == "choice":
        if not isinstance(value, list) or not value:
            raise ConstraintRefused("structured_outputs.choice must be a non-empty list", "structured_outputs")
        return Constraint("choice", choices=tuple(str(c) for c in value))
    return None  # structural_tag


def _vllm_response_format(fmt: Any) -> Constraint | None:
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in VLLM_FORMATS:
        raise ConstraintRefused(
            f"response_format.type: Input should be 'text', 'json_object', 'json_schema' or 'structural_tag', "
            f"got {kind!r}",
            "response_format.type",
        )
    if kind == "json_object":
        return Constraint("json", ANY_OBJECT)
    if kind != "json_schema":
        return None
    spec = fmt.get("json_schema")
    if spec is None:
        raise ConstraintRefused(
            "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
            "response_format",
        )
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise ConstraintRefused("response_format.json_schema.name: Field required", "response_format.json_schema.name")
    schema = spec.get("schema")
    if schema is None:
        raise ConstraintRefused("You must use one kind of structured outputs constraint but none are specified")
    return Constraint("json", _json_value(schema, "response_format.json_schema.schema"))


# ---- SGLang: response_format, regex, ebnf (and json_schema on completions) -----------

SGLANG_FORMATS = ("text", "json_object", "json_schema", "structural_tag")


def sglang_constraint(body: dict[str, Any], kind: str) -> Constraint | None:
    """`response_format` (`json_schema` needs its `schema`), the top-level `regex` and
    `ebnf`, and on completions a top-level `json_schema` string; at most one of them
    (`srt/sampling/sampling_params.py` `verify`)."""
    found: list[Constraint] = []
    fmt = body.get("response_format")
    if fmt is not None:
        found += _sglang_response_format(fmt)
    if kind == "completion" and body.get("json_schema") is not None:
        found.append(Constraint("json", _json_value(body["json_schema"], "json_schema")))
    if body.get("regex") is not None:
        found.append(_checked(Constraint("regex", pattern=str(body["regex"]))))
    if body.get("ebnf") is not None:
        found.append(_checked(Constraint("grammar", pattern=str(body["ebnf"]))))
    if len(found) > 1:
        raise ConstraintRefused("Only one of regex, json_schema, or ebnf can be set.")
    return found[0] if found else None


def _sglang_response_format(fmt: Any) -> list[Constraint]:
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in SGLANG_FORMATS:
        raise ConstraintRefused(
            f"response_format.type: Input should be 'text', 'json_object', 'json_schema' or 'structural_tag' "
            f"[type=literal_error, input_value={kind!r}]"
        )
    if kind == "json_object":
        return [Constraint("json", ANY_OBJECT)]
    if kind != "json_schema":
        return []
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or spec.get("schema") is None:
        raise ConstraintRefused("response_format.json_schema.schema: Field required [type=missing]")
    return [Constraint("json", _json_value(spec["schema"], "response_format.json_schema.schema"))]


# ---- TRT-LLM: response_format with its own types --------------------------------------

TRTLLM_FORMAT_KEYS = ("type", "schema", "json_schema", "regex", "ebnf", "format")
TRTLLM_FORMATS = ("text", "json", "json_schema", "json_object", "regex", "ebnf", "structural_tag")


def trtllm_format_problems(fmt: Any) -> list[dict[str, Any]]:
    """Pydantic's objections to a `response_format` (`ResponseFormat`, extra="forbid")."""
    if not isinstance(fmt, dict):
        return [_problem("model_type", (), "Input should be a valid dictionary", fmt)]
    problems = [
        _problem("extra_forbidden", (k,), "Extra inputs are not permitted", v)
        for k, v in fmt.items()
        if k not in TRTLLM_FORMAT_KEYS
    ]
    if fmt.get("type") not in TRTLLM_FORMATS:
        expected = ", ".join(repr(t) for t in TRTLLM_FORMATS)
        problems.append(_problem("literal_error", ("type",), f"Input should be {expected}", fmt.get("type")))
    return problems


def _problem(kind: str, loc: tuple[str, ...], message: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "loc": ("body", "response_format", *loc), "msg": message, "input": value}


def trtllm_constraint(body: dict[str, Any]) -> Constraint | None:
    """`_response_format_to_guided_decoding_params` (`tensorrt_llm/serve/openai_protocol.py`):
    `json` takes `schema`; `json_schema` takes OpenAI's wrapper (its `schema`) or a bare
    schema; `regex` and `ebnf` take theirs; a missing one is a ValueError (a flat 400)."""
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return None
    kind = fmt["type"]
    if kind in ("json", "json_schema", "regex", "ebnf"):
        field = {"json": "schema", "json_schema": "json_schema", "regex": "regex", "ebnf": "ebnf"}[kind]
        if fmt.get(field) is None:
            raise ConstraintRefused(
                f"response_format.{field} is required for response_format.type == {kind!r}, but got None."
            )
    if kind == "json":
        return Constraint("json", fmt["schema"])
    if kind == "json_schema":
        spec = fmt["json_schema"]
        return Constraint("json", spec["schema"] if isinstance(spec, dict) and "schema" in spec else spec)
    if kind == "json_object":
        return Constraint("json", ANY_OBJECT)
    if kind == "regex":
        return _checked(Constraint("regex", pattern=str(fmt["regex"])))
    if kind == "ebnf":
        return _checked(Constraint("grammar", pattern=str(fmt["ebnf"])))
    return None  # text, structural_tag


# ---- TGI: GrammarType {"type": "json" | "json_object" | "regex" | "json_schema", "value"} -

TGI_GRAMMARS = ("json", "json_object", "regex", "json_schema")


class TgiGrammarRejected(ValueError):
    """A grammar serde cannot deserialize: axum's plain-text 422 (`message` is serde's)."""


def tgi_grammar_shape(field: str, grammar: Any) -> None:
    """Serde's check of an adjacently tagged `GrammarType` (`router/src/lib.rs`)."""
    if not isinstance(grammar, dict):
        raise TgiGrammarRejected(f"{field}: invalid type: expected internally tagged enum GrammarType")
    kind = grammar.get("type")
    if kind not in TGI_GRAMMARS:
        raise TgiGrammarRejected(
            f"{field}: unknown variant `{kind}`, expected one of `json`, `regex`, `json_schema`"
            if isinstance(kind, str)
            else f"{field}: missing field `type`"
        )
    if "value" not in grammar:
        raise TgiGrammarRejected(f"{field}: missing field `value`")
    value = grammar["value"]
    if kind == "regex" and not isinstance(value, str):
        raise TgiGrammarRejected(f"{field}: invalid type: expected a string")
    if kind == "json_schema" and (not isinstance(value, dict) or "schema" not in value):
        raise TgiGrammarRejected(f"{field}: missing field `schema`")


def tgi_constraint(grammar: Any) -> Constraint:
    """`validation.rs`: a JSON grammar (an object, or a string holding one) must be a
    valid schema with `properties`; TGI compiles it to a regex without optional
    whitespace and without undeclared properties, so its documents are compact and
    `{"properties": {}}` gives `{}`. Refusals read "grammar is not valid: …"."""
    kind, value = grammar["type"], grammar["value"]
    if kind == "regex":
        return _checked(Constraint("regex", pattern=value))
    schema = value["schema"] if kind == "json_schema" else value
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise ConstraintRefused(f"grammar is not valid: {exc}") from exc
    elif not isinstance(schema, dict):
        raise ConstraintRefused("grammar is not supported")
    if not isinstance(schema, dict) or "properties" not in schema:
        raise ConstraintRefused("grammar is not valid: Grammar must have a 'properties' field")
    return Constraint("json", schema, compact=True, declared_only=True)
