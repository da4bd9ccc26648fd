"""Structured output (`response_format`): JSON mode and JSON schema."""

from __future__ import annotations

from typing import Any

from conformance.check import CheckList
from conformance.checks.common import JsonShape, choice_of, judge_json_text, message_of
from conformance.context import Context
from conformance.http import Exchange

CHECKS = CheckList("structured", profile="structured", needs=("structured_output",))

# A schema whose every valid instance is tiny, so a random-weight model under a
# grammar finishes well within max_tokens.
ENUM_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
STRUCTURED_MAX_TOKENS = 200
CONTENT = "choices[0].message.content"


VERDICT = JsonShape(
    '{"answer": "yes"|"no"}',
    lambda v: isinstance(v, dict) and set(v) == {"answer"} and v["answer"] in ("yes", "no"),
    "content does not follow the schema",
)
AN_OBJECT = JsonShape("a JSON object", lambda v: isinstance(v, dict), "content is JSON but not an object")


async def _structured_answer(ctx: Context, **request: Any) -> tuple[Exchange, Any, Any]:
    """(exchange, content, finish_reason) of a structured-output request."""
    ex = await ctx.chat(max_tokens=STRUCTURED_MAX_TOKENS, **request)
    body = ctx.ok_json(ex, capability="structured_output")
    return ex, message_of(body).get("content"), choice_of(body).get("finish_reason")


@CHECKS.must("structured.json_schema", "response_format json_schema yields content that validates against the schema")
async def json_schema(ctx: Context) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": ENUM_SCHEMA, "strict": True}}
    ex, content, finish = await _structured_answer(ctx, response_format=response_format)
    seen = f"{content!r} (finish_reason {finish!r})"[:300]
    judge_json_text(ctx, ex, content, CONTENT, "content is not JSON", VERDICT, (VERDICT.expected, seen))


@CHECKS.should("structured.json_object", "response_format json_object yields content that parses as a JSON object")
async def json_object(ctx: Context) -> None:
    messages = [{"role": "user", "content": "Answer in JSON: is the sky blue?"}]
    ex, content, finish = await _structured_answer(ctx, response_format={"type": "json_object"}, messages=messages)
    if finish == "length":
        raise ctx.skip(
            f"the model's JSON did not finish within {STRUCTURED_MAX_TOKENS} tokens "
            "(an open-ended JSON grammar lets a random model run on)"
        )
    judge_json_text(ctx, ex, content, CONTENT, "content is not JSON", AN_OBJECT)


@CHECKS.must("structured.schema_missing_400", "response_format json_schema without a schema is refused with 400")
async def schema_missing(ctx: Context) -> None:
    ex = await ctx.chat(response_format={"type": "json_schema"})
    ctx.expect_client_error(ex, (400, 422), "json_schema without json_schema")


@CHECKS.should("structured.unknown_type_400", "an unknown response_format type is refused with 400")
async def unknown_type(ctx: Context) -> None:
    ex = await ctx.chat(response_format={"type": "conformance_no_such_format"})
    ctx.expect_client_error(ex, (400, 422), "unknown response_format type")
