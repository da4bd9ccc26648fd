"""The Responses API (`/v1/responses`): the response object and every stream event
against OpenAI's published schemas (conformance/openapi.py), the raw stream's
framing, `sequence_number` and event order (conformance/responses_sse.py), the
official client's `responses.create` and `responses.stream`, stored responses,
`previous_response_id`, a tools round trip, and `max_output_tokens`."""

from __future__ import annotations

import json
from typing import Any

from conformance.check import CheckList
from conformance.context import Context
from conformance.http import Exchange
from conformance.openapi import openapi_issues, stream_event_issues
from conformance.responses_sse import ResponsesStream, parse_responses_stream
from conformance.result import CheckFailed, Evidence

CHECKS = CheckList("responses", profile="responses", needs=("responses",))
TOOL_CHECKS = CheckList("responses", profile="responses", needs=("responses", "tools"))
STRUCTURED_CHECKS = CheckList("responses", profile="responses", needs=("responses", "structured_output"))

MAX_OUTPUT = 32  # enough for a short answer; a random model usually runs to it (then: incomplete)
TOOL_MAX_OUTPUT = 200
UNIT_TOOL = {
    "type": "function",
    "name": "set_unit",
    "description": "Choose the temperature unit",
    "parameters": {
        "type": "object",
        "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["unit"],
        "additionalProperties": False,
    },
    "strict": True,
}
FORCED = {"tools": [UNIT_TOOL], "tool_choice": {"type": "function", "name": "set_unit"}}


async def whole(ctx: Context, what: str = "response", capability: str | None = None, **overrides: Any) -> dict:
    overrides.setdefault("max_output_tokens", MAX_OUTPUT)
    ex = await ctx.responses(**overrides)
    body = ctx.ok_json(ex, what, capability=capability)
    _schema(ctx, body, "Response", ex, what)
    return body


async def streamed(ctx: Context, **overrides: Any) -> tuple[Exchange, ResponsesStream]:
    overrides.setdefault("max_output_tokens", MAX_OUTPUT)
    ex = await ctx.responses(stream=True, **overrides)
    ctx.complete_body(ex, "stream")
    if ex.status != 200 or not ex.content_type.startswith("text/event-stream"):
        raise ctx.fail(
            f"stream: HTTP {ex.status} {ex.content_type}",
            expected="HTTP 200 text/event-stream",
            seen=f"HTTP {ex.status} {ex.content_type or '<none>'}",
            offending=ex.raw[:600].decode("utf-8", "replace"),
            exchange=ex,
        )
    return ex, parse_responses_stream(ex.raw)


async def baseline_stream(ctx: Context) -> tuple[Exchange, ResponsesStream]:
    if "responses_stream" not in ctx.memo:
        ctx.memo["responses_stream"] = await streamed(ctx)
    return ctx.memo["responses_stream"]


def _schema(ctx: Context, body: Any, name: str, ex: Exchange, what: str) -> None:
    issues = openapi_issues(body, name)
    if issues:
        raise ctx.field_issues(f"{what} does not validate against {name}", issues, ex, json.dumps(body)[:600])


def _rules(ctx: Context, parsed: ResponsesStream, ex: Exchange, *rules: str) -> None:
    broken = parsed.rules_broken(*rules)
    if broken:
        raise CheckFailed(
            f"{len(broken)} violation(s) of {', '.join(rules)}: {broken[0]}",
            [Evidence(expected=f"rule {v.rule}", seen=str(v), request=ex.request_summary()) for v in broken[:10]],
        )


def _items(final: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [i for i in final.get("output") or [] if isinstance(i, dict) and i.get("type") == kind]


def _text(final: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in _items(final, "message")
        for part in item.get("content") or []
        if isinstance(part, dict) and part.get("type") == "output_text"
    )


@CHECKS.must("responses.create", "POST /v1/responses answers a response object valid against OpenAI's schema")
async def create(ctx: Context) -> None:
    body = await whole(ctx)
    problems = []
    if body.get("status") not in ("completed", "incomplete"):
        problems.append(f"status {body.get('status')!r}")
    if not _items(body, "message") or not _text(body):
        problems.append("no message item with output_text")
    usage = body.get("usage") or {}
    if not usage.get("output_tokens") or usage.get("total_tokens") != usage.get("input_tokens", 0) + usage.get(
        "output_tokens", 0
    ):
        problems.append(f"usage {usage!r}")
    if problems:
        raise CheckFailed("; ".join(problems), [Evidence(expected="a finished message answer", seen=str(body)[:600])])


@CHECKS.must("responses.stream_framing", "the raw stream is typed SSE: event and data lines that agree, no [DONE]")
async def stream_framing(ctx: Context) -> None:
    ex, parsed = await baseline_stream(ctx)
    _rules(ctx, parsed, ex, "framing", "json", "event-type", "no-done")


@CHECKS.must("responses.stream_sequence", "sequence_number runs 0, 1, 2, ... over the stream's events")
async def stream_sequence(ctx: Context) -> None:
    ex, parsed = await baseline_stream(ctx)
    _rules(ctx, parsed, ex, "sequence")


@CHECKS.must("responses.stream_order", "events come in the order the official client's stream helper accumulates")
async def stream_order(ctx: Context) -> None:
    ex, parsed = await baseline_stream(ctx)
    _rules(ctx, parsed, ex, "order", "same-id")


@CHECKS.must("responses.stream_schema", "every stream event validates against its schema in OpenAI's spec")
async def stream_schema(ctx: Context) -> None:
    ex, parsed = await baseline_stream(ctx)
    for i, event in enumerate(parsed.events):
        issues = stream_event_issues(event)
        if issues:
            raise ctx.field_issues(f"event {i} ({event.get('type')}) does not validate", issues, ex, str(event)[:600])


@CHECKS.must("responses.stream_agrees", "the deltas rebuild the terminal response; the stored response is the same")
async def stream_agrees(ctx: Context) -> None:
    ex, parsed = await baseline_stream(ctx)
    final = parsed.final
    if final is None:
        raise ctx.fail("no terminal response", expected="response.completed or .incomplete", seen=str(parsed.kinds))
    deltas = "".join(e.get("delta", "") for e in parsed.events if e.get("type") == "response.output_text.delta")
    done = [e for e in parsed.events if e.get("type") == "response.output_item.done"]
    if deltas != _text(final) or [e.get("item") for e in done] != final.get("output"):
        raise ctx.fail(
            "the stream's deltas and items differ from its terminal response",
            expected=repr(_text(final))[:200],
            seen=repr(deltas)[:200],
            exchange=ex,
        )
    stored = await ctx.http.get(f"/responses/{final.get('id')}")
    if ctx.ok_json(stored, "GET /v1/responses/{id}") != final:
        raise ctx.fail("the stored response differs", expected=str(final)[:300], seen=stored.raw[:300].decode())


@CHECKS.must("responses.sdk_create", "the official client's responses.create (strict validation) parses the answer")
async def sdk_create(ctx: Context) -> None:
    r = await ctx.sdk.responses.create(**ctx.responses_body(max_output_tokens=MAX_OUTPUT))
    if r.object != "response" or not r.output_text:
        raise ctx.fail("no text", expected="a response with output_text", seen=repr(r)[:300])


@TOOL_CHECKS.must("responses.sdk_stream", "the official client's responses.stream accumulates a forced tool call")
async def sdk_stream(ctx: Context) -> None:
    request = ctx.responses_body(max_output_tokens=TOOL_MAX_OUTPUT, **FORCED)
    async with ctx.sdk.responses.stream(**request) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    if not calls or calls[0].name != "set_unit" or not calls[0].call_id:
        raise ctx.fail("no set_unit call", expected="a function_call item", seen=repr(final.output)[:300])
    json.loads(calls[0].arguments)


@TOOL_CHECKS.must("responses.tools_round_trip", "a function_call_output continues the conversation into a message")
async def tools_round_trip(ctx: Context) -> None:
    first = await whole(ctx, "forced call", capability="tools", max_output_tokens=TOOL_MAX_OUTPUT, **FORCED)
    calls = _items(first, "function_call")
    if first.get("status") != "completed" or not calls:
        raise ctx.fail("no function call", expected="status completed, a function_call item", seen=str(first)[:400])
    output = {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": '{"ok": true}'}
    second = await whole(ctx, "answer to the tool output", input=[output], previous_response_id=first["id"])
    if not _items(second, "message"):
        raise ctx.fail("no message after the tool output", expected="a message item", seen=str(second)[:400])
    # The same conversation sent whole, without the store.
    items = [
        {"role": "user", "content": "Which unit?"},
        *({k: c[k] for k in ("type", "call_id", "name", "arguments")} for c in calls),
        output,
    ]
    third = await whole(ctx, "the conversation resent", input=items, tools=[UNIT_TOOL], store=False)
    if not _items(third, "message"):
        raise ctx.fail("no message", expected="a message item", seen=str(third)[:400])


@CHECKS.must("responses.previous_response_id", "previous_response_id continues the stored conversation")
async def previous_response(ctx: Context) -> None:
    first = await whole(ctx, "first turn", input="Remember the word apple.")
    second = await whole(ctx, "second turn", input="Which word?", previous_response_id=first["id"])
    before = first["usage"]["input_tokens"] + first["usage"]["output_tokens"]
    if second.get("previous_response_id") != first["id"] or second["usage"]["input_tokens"] <= before:
        raise ctx.fail(
            "the second turn did not read the first",
            expected=f"previous_response_id {first['id']}, input_tokens above {before}",
            seen=f"{second.get('previous_response_id')!r}, input_tokens {second['usage']['input_tokens']}",
        )
    listed = await ctx.http.get(f"/responses/{second['id']}/input_items?order=asc")
    body = ctx.ok_json(listed, "input_items")
    _schema(ctx, body, "ResponseItemList", listed, "input_items")
    roles = [item.get("role") for item in body.get("data") or []]
    if roles != ["user", "assistant", "user"]:
        raise ctx.fail("input_items", expected="user, assistant, user", seen=str(roles), exchange=listed)


@CHECKS.must("responses.max_output_tokens", "an answer cut by max_output_tokens is incomplete, in both forms")
async def max_output(ctx: Context) -> None:
    body = await whole(ctx, max_output_tokens=16)
    ex, parsed = await streamed(ctx, max_output_tokens=16)
    final = parsed.final or {}
    for form, answer, last in (("whole", body, None), ("stream", final, parsed.kinds[-1:])):
        if answer.get("usage", {}).get("output_tokens", 0) < 16:
            continue  # the model stopped by itself before the limit: nothing was cut
        ok = answer.get("status") == "incomplete" and answer.get("incomplete_details") == {
            "reason": "max_output_tokens"
        }
        if not ok or (last is not None and last != ["response.incomplete"]):
            raise ctx.fail(
                f"{form}: cut at max_output_tokens but not incomplete",
                expected="status incomplete, incomplete_details.reason max_output_tokens, response.incomplete last",
                seen=f"{answer.get('status')!r} {answer.get('incomplete_details')!r} {last}",
            )


@STRUCTURED_CHECKS.must("responses.json_schema", "text.format json_schema yields output_text valid against the schema")
async def json_schema(ctx: Context) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "name": "verdict", "schema": schema, "strict": True}
    body = await whole(ctx, capability="structured_output", max_output_tokens=TOOL_MAX_OUTPUT, text={"format": fmt})
    try:
        parsed = json.loads(_text(body))
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("ok"), bool):
        raise ctx.fail("output_text does not follow the schema", expected='{"ok": bool}', seen=_text(body)[:300])


@CHECKS.must("responses.not_found", "an unknown response id answers 404 in the error envelope")
async def not_found(ctx: Context) -> None:
    for ex in (
        await ctx.http.get("/responses/resp_doesnotexist0000"),
        await ctx.responses(previous_response_id="resp_doesnotexist0000"),
    ):
        ctx.expect_client_error(ex, (404,), "unknown response id")


@CHECKS.should("responses.unsupported", "a feature the server lacks (background) is a 400 naming the parameter")
async def unsupported(ctx: Context) -> None:
    ex = await ctx.responses(background=True)
    if ex.status == 200:
        return  # served: nothing to judge
    ctx.expect_client_error(ex, (400,), "background")
    param = (ex.json().get("error") or {}).get("param") if isinstance(ex.json(), dict) else None
    if param != "background":
        raise ctx.fail("the 400 does not name the parameter", expected="param background", seen=repr(param))


ALL = [*CHECKS, *TOOL_CHECKS, *STRUCTURED_CHECKS]
