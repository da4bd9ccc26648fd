"""docs/openai-checklist.md items 28-33: tool calls, streamed and not; required, named, none, parallel."""

from __future__ import annotations

import functools
from typing import Any

import openai

from conformance.check import CheckList
from conformance.checks.common import (
    JsonShape,
    body_head,
    by_choice,
    choice_of,
    chunk_failure,
    field_failure,
    judge_json_text,
    judge_no_tool_calls,
    message_of,
    sdk_final_completion,
    sdk_stream_failure,
)
from conformance.context import Context, refuses_feature
from conformance.http import Exchange
from conformance.result import CheckFailed, Evidence

CHECKS = CheckList("tools", profile="tools", needs=("tools",))

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time.",
        "parameters": {"type": "object", "properties": {}},
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]
TOOL_NAMES = {"get_weather", "get_time"}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
# Enough room for a random-weight model under a grammar to finish one call.
TOOL_MAX_TOKENS = 200
TOOL_PROMPT = [{"role": "user", "content": "What is the weather in Paris?"}]
CITY_ARGUMENTS = JsonShape(
    'an object with key "city"',
    lambda v: isinstance(v, dict) and "city" in v,
    "arguments do not follow the tool's parameters",
)


def tool_body(ctx: Context, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"messages": TOOL_PROMPT, "tools": TOOLS, "max_tokens": TOOL_MAX_TOKENS}
    fields.update(overrides)
    return ctx.chat_body(**fields)


async def tool_chat(ctx: Context, memo_key: str | None = None, **overrides: Any) -> tuple[Exchange, dict[str, Any]]:
    if memo_key and memo_key in ctx.memo:
        return ctx.memo[memo_key]
    ex = await ctx.http.post("/chat/completions", tool_body(ctx, **overrides))
    result = (ex, ctx.ok_json(ex, capability="tools"))
    if memo_key:
        ctx.memo[memo_key] = result
    return result


def judge_tool_calls(
    ctx: Context, ex: Exchange, body: dict[str, Any], *, names: set[str], finish: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Non-stream tool calls: non-empty id, type function, a known name, string
    arguments, the expected finish_reason, and no text content."""
    choice = choice_of(body)
    message = message_of(body)
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        raise field_failure(
            ctx,
            ex,
            "choices[0].message.tool_calls",
            "no tool_calls",
            "message.tool_calls with at least one call",
            f"tool_calls={calls!r}, content={str(message.get('content'))[:200]!r}, "
            f"finish_reason={choice.get('finish_reason')!r}",
            offending=message,
        )
    ids = []
    for i, call in enumerate(calls):
        where = f"choices[0].message.tool_calls[{i}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
            raise field_failure(ctx, ex, f"{where}.id", "tool call id", "a non-empty string id", repr(call)[:200])
        ids.append(call["id"])
        if call.get("type") != "function":
            raise field_failure(ctx, ex, f"{where}.type", "tool call type", "'function'", repr(call.get("type")))
        if not isinstance(fn, dict) or fn.get("name") not in names:
            raise field_failure(
                ctx, ex, f"{where}.function.name", "tool call name", f"one of {sorted(names)}", repr(fn)[:200]
            )
        if not isinstance(fn.get("arguments"), str):
            raise field_failure(
                ctx,
                ex,
                f"{where}.function.arguments",
                "arguments must be a JSON-encoded string",
                "a string",
                f"{type(fn.get('arguments')).__name__}: {fn.get('arguments')!r}"[:200],
            )
    if len(set(ids)) != len(ids):
        raise ctx.fail("tool call ids repeat", expected="unique ids", seen=str(ids), exchange=ex)
    if choice.get("finish_reason") not in finish:
        raise field_failure(
            ctx,
            ex,
            "choices[0].finish_reason",
            "finish_reason with tool calls",
            " or ".join(finish),
            repr(choice.get("finish_reason")),
        )
    if message.get("content") not in (None, ""):
        raise field_failure(
            ctx,
            ex,
            "choices[0].message.content",
            "text beside the tool calls",
            "content null or empty",
            repr(message.get("content"))[:200],
        )
    return calls


async def named_calls(ctx: Context) -> tuple[Exchange, list[dict[str, Any]]]:
    """The judged calls of the (memoized) answer to a tool_choice naming get_weather."""
    ex, body = await tool_chat(ctx, "tools.named", tool_choice=NAMED)
    return ex, judge_tool_calls(ctx, ex, body, names={"get_weather"}, finish=("stop", "tool_calls"))


@CHECKS.must("tools.required", "tool_choice=required yields well-formed tool_calls and finish_reason tool_calls")
async def required(ctx: Context) -> None:
    ex, body = await tool_chat(ctx, "tools.required", tool_choice="required")
    judge_tool_calls(ctx, ex, body, names=TOOL_NAMES, finish=("tool_calls",))


@CHECKS.must("tools.named", "a named tool_choice yields a call to exactly that function")
async def named(ctx: Context) -> None:
    ex, calls = await named_calls(ctx)
    if len(calls) != 1:
        raise ctx.fail(
            "a named tool_choice calls one function", expected="exactly 1 call", seen=f"{len(calls)}", exchange=ex
        )


@CHECKS.should("tools.arguments_json", "tool-call arguments parse as a JSON object with the schema's required keys")
async def arguments_json(ctx: Context) -> None:
    ex, calls = await named_calls(ctx)
    args = calls[0]["function"]["arguments"]
    where = "choices[0].message.tool_calls[0].function.arguments"
    unparsed_evidence = ("a JSON object string", repr(args)[:300])
    judge_json_text(ctx, ex, args, where, "arguments are not JSON", CITY_ARGUMENTS, unparsed_evidence)


@CHECKS.must("tools.none", "tool_choice=none yields no tool_calls")
async def choice_none(ctx: Context) -> None:
    ex, body = await tool_chat(ctx, tool_choice="none", max_tokens=16)
    judge_no_tool_calls(ctx, ex, body, "tool calls despite tool_choice=none")
    _judge_no_tool_calls_finish(ctx, ex, body, "despite tool_choice=none")


@CHECKS.must("tools.auto_shape", "tool_choice=auto answers 200 and any tool calls it makes are well-formed")
async def auto(ctx: Context) -> None:
    ex, body = await tool_chat(ctx, tool_choice="auto", max_tokens=32)
    if message_of(body).get("tool_calls"):
        judge_tool_calls(ctx, ex, body, names=TOOL_NAMES, finish=("tool_calls",))
    else:
        _judge_no_tool_calls_finish(ctx, ex, body, "without tool_calls")


def _judge_no_tool_calls_finish(ctx: Context, ex: Exchange, body: dict[str, Any], why: str) -> None:
    if choice_of(body).get("finish_reason") == "tool_calls":
        raise field_failure(
            ctx, ex, "choices[0].finish_reason", f"finish_reason tool_calls {why}", "stop or length", "tool_calls"
        )


def judge_tool_stream(ctx: Context, ex: Exchange, chunks: list[dict[str, Any]]) -> dict[int, dict[str, str]]:
    """Streamed tool-call deltas: dense integer indices from 0, id/type/name only
    in the first delta of an index, a function object in every delta, at most
    one entry per index per chunk. Returns {tool index: {id, name, arguments}}."""
    streams = by_choice(chunks)
    if 0 not in streams:
        raise ctx.fail(
            "no choice 0 in the stream", expected="chunks for choice 0", seen=str(sorted(streams)), exchange=ex
        )
    calls: dict[int, dict[str, str]] = {}
    per_chunk: dict[int, list[int]] = {}
    for n, delta in streams[0].tool_deltas:
        bad = functools.partial(chunk_failure, ctx, ex, chunks[n], f"chunk {n} delta.tool_calls")
        idx = delta.get("index")
        if not isinstance(idx, int) or isinstance(idx, bool):
            raise bad("tool-call delta without an integer index", "index: int", repr(delta)[:200])
        if idx in per_chunk.setdefault(n, []):
            raise bad(
                "two entries for one tool index in one chunk (the client stores them apart)",
                "at most one entry per index per chunk",
                repr(delta)[:200],
            )
        per_chunk[n].append(idx)
        fn = delta.get("function")
        if not isinstance(fn, dict):
            raise bad(
                "tool-call delta without a function object (the client's .stream() asserts on it)",
                '"function": {...} in every delta',
                repr(delta)[:200],
            )
        if idx not in calls:
            if idx != len(calls):
                raise bad("tool indices not dense from 0", f"index {len(calls)}", f"index {idx}")
            if not delta.get("id") or delta.get("type") != "function" or not fn.get("name"):
                raise bad(
                    "the first delta of a tool call must carry id, type and function.name",
                    '{"index", "id", "type": "function", "function": {"name", ...}}',
                    repr(delta)[:300],
                )
            calls[idx] = {"id": delta["id"], "name": fn["name"], "arguments": ""}
        elif "id" in delta or "type" in delta or "name" in fn:
            raise bad(
                "id/type/name repeated in a later delta (the client concatenates them)",
                "only function.arguments after the first delta",
                repr(delta)[:300],
            )
        args = fn.get("arguments")
        if args is not None:
            if not isinstance(args, str):
                raise bad("streamed arguments must be string fragments", "a string", repr(args)[:200])
            calls[idx]["arguments"] += args
    return calls


@CHECKS.must(
    "tools.stream_required",
    "streamed tool calls (required) have dense indices, id/type/name once, a function in every delta",
)
async def stream_required(ctx: Context) -> None:
    ex = await ctx.http.post("/chat/completions", tool_body(ctx, tool_choice="required", stream=True))
    chunks = ctx.ok_stream(ex, capability="tools")
    calls = judge_tool_stream(ctx, ex, chunks)
    if not calls:
        raise field_failure(
            ctx, ex, "delta.tool_calls", "no streamed tool calls", "at least one tool-call delta", "none"
        )
    finishes = by_choice(chunks)[0].finishes
    if [f for _, f in finishes] != ["tool_calls"]:
        raise field_failure(
            ctx,
            ex,
            "finish_reason",
            "finish_reason of a streamed required tool call",
            "exactly one 'tool_calls'",
            str(finishes),
        )


@CHECKS.should(
    "tools.stream_matches_nonstream", "streamed named-tool arguments concatenate to the non-stream arguments"
)
async def stream_matches(ctx: Context) -> None:
    _, plain = await named_calls(ctx)
    ex = await ctx.http.post("/chat/completions", tool_body(ctx, tool_choice=NAMED, stream=True))
    calls = judge_tool_stream(ctx, ex, ctx.ok_stream(ex, capability="tools"))
    if len(calls) != len(plain) or any(calls[i]["arguments"] != plain[i]["function"]["arguments"] for i in calls):
        raise ctx.fail(
            "streamed arguments differ from the non-stream ones",
            expected=repr([c["function"]["arguments"] for c in plain])[:300],
            seen=repr([c["arguments"] for c in calls.values()])[:300],
            exchange=ex,
        )


@CHECKS.must(
    "tools.sdk_final_completion", "the official client's stream().get_final_completion() rebuilds valid tool calls"
)
async def sdk_final(ctx: Context) -> None:
    request = tool_body(ctx, tool_choice=NAMED)
    try:
        final = await sdk_final_completion(ctx, request)
    except openai.APIStatusError as exc:
        if refuses_feature(exc.status_code, str(exc), getattr(exc, "code", None)):
            raise ctx.skip(f"the server refuses tools: {exc}"[:300]) from None
        raise ctx.fail(f"HTTP {exc.status_code}", expected="HTTP 200", seen=str(exc)[:500]) from None
    except (openai.APIError, AssertionError, IndexError) as exc:  # a chunk rejected, or the helper broke
        raise sdk_stream_failure(ctx, exc) from None
    calls = final.choices[0].message.tool_calls if final.choices else None
    if not calls:
        raise ctx.fail("no tool calls in the final completion", expected="one get_weather call", seen=repr(final)[:300])
    call = calls[0]
    if call.function.name != "get_weather":
        raise ctx.fail(
            "rebuilt name is wrong (concatenated?)",
            expected="'get_weather'",
            seen=repr(call.function.name),
            where="tool_calls[0].function.name",
        )
    if not call.id:
        raise ctx.fail("rebuilt id is empty", expected="a non-empty id", seen=repr(call.id), where="tool_calls[0].id")
    half = len(call.id) // 2
    if len(call.id) % 2 == 0 and call.id[:half] == call.id[half:]:
        raise ctx.fail(
            "rebuilt id is doubled (the id was repeated in deltas)",
            expected="an id sent once",
            seen=repr(call.id),
            where="tool_calls[0].id",
        )


@CHECKS.must("tools.parallel_false", "parallel_tool_calls=false yields at most one call")
async def parallel_false(ctx: Context) -> None:
    ex, body = await tool_chat(ctx, tool_choice="required", parallel_tool_calls=False)
    calls = judge_tool_calls(ctx, ex, body, names=TOOL_NAMES, finish=("tool_calls",))
    if len(calls) > 1:
        raise ctx.fail(
            "several calls with parallel_tool_calls=false",
            expected="at most 1 call",
            seen=f"{len(calls)}",
            offending=calls,
            exchange=ex,
        )


@CHECKS.must("tools.named_unknown_400", "a named tool_choice not in tools is refused with 400")
async def named_unknown(ctx: Context) -> None:
    ex = await ctx.http.post(
        "/chat/completions", tool_body(ctx, tool_choice={"type": "function", "function": {"name": "no_such_tool"}})
    )
    ctx.expect_client_error(ex, (400,), "tool_choice naming an unknown tool")


@CHECKS.must("tools.choice_without_tools_400", "tool_choice=required without tools is refused with 400")
async def choice_without_tools(ctx: Context) -> None:
    ex = await ctx.chat(tool_choice="required")
    ctx.expect_client_error(ex, (400,), "tool_choice without tools")


@CHECKS.must(
    "tools.round_trip", "an assistant tool_calls turn followed by a tool result is accepted ('{}' and '' arguments)"
)
async def round_trip(ctx: Context) -> None:
    for args in ('{"city": "Paris"}', "{}", ""):
        messages = [
            *TOOL_PROMPT,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_conformance_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": args},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_conformance_1", "content": "Sunny, 21 C"},
        ]
        ex = await ctx.http.post("/chat/completions", tool_body(ctx, messages=messages, max_tokens=8))
        ctx.skip_if_unsupported(ex, "tools")
        if ex.status != 200:
            raise CheckFailed(
                f"tool round trip refused (arguments {args!r})",
                [
                    Evidence(
                        expected="HTTP 200",
                        seen=f"HTTP {ex.status}: {body_head(ex)}",
                        request=ex.request_summary(),
                    )
                ],
            )
        ctx.ok_json(ex, capability="tools")
