"""docs/openai-checklist.md items 15-27: stream framing, chunk shape, role/finish placement,
stream/non-stream agreement, legacy streams, and stream_options.include_usage."""

from __future__ import annotations

from typing import Any

import openai

from conformance.check import CheckList
from conformance.checks.common import (
    ChoiceStream,
    by_choice,
    chunk_failure,
    field_failure,
    greedy_chat,
    greedy_chat_stream,
    greedy_completion,
    message_of,
    sdk_final_completion,
    usage_chunks,
)
from conformance.context import Context
from conformance.http import Exchange
from conformance.result import CheckFailed, Evidence
from conformance.schema import chat_chunk_issues, completion_issues

CHECKS = CheckList("streaming")


def _framing_failure(ex: Exchange) -> CheckFailed | None:
    if not ex.content_type.startswith("text/event-stream"):
        return CheckFailed(
            "not an event stream",
            [
                Evidence(
                    expected="Content-Type: text/event-stream",
                    seen=ex.content_type or "<none>",
                    where="header content-type",
                    request=ex.request_summary(),
                )
            ],
        )
    assert ex.sse is not None
    if ex.sse.violations:
        return CheckFailed(
            f"{len(ex.sse.violations)} framing violation(s)",
            [
                Evidence(
                    expected="data: <json>\\n\\n events ending with data: [DONE]",
                    seen=str(v),
                    where=f"rule {v.rule}",
                    request=ex.request_summary(),
                    offending=(
                        ex.sse.events[v.event_index].data[:300]
                        if v.event_index is not None and v.event_index < len(ex.sse.events)
                        else None
                    ),
                )
                for v in ex.sse.violations[:10]
            ],
        )
    return None


@CHECKS.must("stream.framing", "a chat stream is text/event-stream of data: <json> events, [DONE] last, nothing after")
async def framing(ctx: Context) -> None:
    ex, _ = await greedy_chat_stream(ctx)
    failure = _framing_failure(ex)
    if failure:
        raise failure


@CHECKS.must(
    "stream.chunk_schema", "every chunk is a chat.completion.chunk with required fields and no forbidden nulls"
)
async def chunk_schema(ctx: Context) -> None:
    ex, chunks = await greedy_chat_stream(ctx)
    if not chunks:
        raise ctx.fail("no chunks", expected="at least one chunk", seen="none", exchange=ex)
    for n, chunk in enumerate(chunks):
        issues = chat_chunk_issues(chunk)
        if issues:
            raise ctx.field_issues(f"chunk {n} does not match CreateChatCompletionStreamResponse", issues, ex, chunk)


@CHECKS.must("stream.consistent_ids", "id, created and model are the same on every chunk")
async def consistent_ids(ctx: Context) -> None:
    ex, chunks = await greedy_chat_stream(ctx)
    if not chunks:
        raise ctx.fail("no chunks", expected="at least one chunk", seen="none", exchange=ex)
    first = chunks[0]
    for n, chunk in enumerate(chunks[1:], start=1):
        for key in ("id", "created", "model"):
            if chunk.get(key) != first.get(key):
                raise chunk_failure(
                    ctx,
                    ex,
                    chunk,
                    f"chunk {n}.{key}",
                    f"{key} changes within the stream",
                    repr(first.get(key)),
                    repr(chunk.get(key)),
                )


def misplaced_role(cs: ChoiceStream) -> tuple[int, str, str, str, str] | None:
    """Where one choice's role is misplaced, if it is: the chunk number, the field in
    it, what is wrong, what was expected and what was seen."""
    if len(cs.roles) > 1:
        return (
            cs.roles[1][0],
            " delta.role",
            "role repeated (the official client concatenates it: 'assistantassistant')",
            "role only in the first delta of the choice",
            f"role in chunks {[r[0] for r in cs.roles]}",
        )
    if cs.roles and cs.roles[0][0] != cs.chunk_numbers[0]:
        n = cs.roles[0][0]
        return n, "", "role arrives after content", "role in the first delta of the choice", f"first in chunk {n}"
    return None


def judge_roles_and_finishes(ctx: Context, ex: Exchange, chunks: list[dict[str, Any]], expect_indices: int) -> None:
    """Role only in the first delta of each choice, exactly one finish_reason per
    choice (on its last chunk), and choices 0..n-1 all present."""
    streams = by_choice(chunks)
    if sorted(streams) != list(range(expect_indices)):
        raise field_failure(
            ctx, ex, "choices[].index", "choice indices", f"indices 0..{expect_indices - 1}", f"{sorted(streams)}"
        )
    for index, cs in streams.items():
        for n, role in cs.roles:
            if role != "assistant":
                raise chunk_failure(
                    ctx, ex, chunks[n], f"chunk {n} choice {index} delta.role", "role value", "'assistant'", repr(role)
                )
        misplaced = misplaced_role(cs)
        if misplaced is not None:
            n, field, problem, expected, seen = misplaced
            raise chunk_failure(ctx, ex, chunks[n], f"chunk {n} choice {index}{field}", problem, expected, seen)
        if len(cs.finishes) != 1:
            raise field_failure(
                ctx,
                ex,
                f"choice {index} finish_reason",
                "finish_reason count",
                "exactly one non-null finish_reason per choice",
                f"{len(cs.finishes)}: {cs.finishes}",
            )
        n, reason = cs.finishes[0]
        if reason not in ("stop", "length", "tool_calls", "content_filter", "function_call"):
            raise chunk_failure(
                ctx,
                ex,
                chunks[n],
                f"chunk {n} choice {index} finish_reason",
                "finish_reason outside the enum",
                "stop|length|tool_calls|content_filter",
                repr(reason),
            )
        if cs.chunk_numbers[-1] != n:
            later = cs.chunk_numbers[cs.chunk_numbers.index(n) + 1]
            raise chunk_failure(
                ctx,
                ex,
                chunks[later],
                f"chunk {later} choice {index}",
                "choice chunks after its finish_reason",
                "finish_reason on the last chunk of the choice",
                f"finish in chunk {n}, another chunk for the choice at {later}",
            )


@CHECKS.must(
    "stream.role_and_finish", "role only in the first delta; exactly one finish_reason, on the choice's last chunk"
)
async def role_and_finish(ctx: Context) -> None:
    ex, chunks = await greedy_chat_stream(ctx)
    judge_roles_and_finishes(ctx, ex, chunks, 1)


@CHECKS.should(
    "stream.no_empty_chunks_before_content",
    "before the first text, at most the one role chunk (benchmarks time TTFT from the first chunk)",
)
async def no_empty_chunks_before_content(ctx: Context) -> None:
    ex, chunks = await greedy_chat_stream(ctx)
    before = []
    for n, chunk in enumerate(chunks):
        deltas = [c.get("delta") or {} for c in chunk.get("choices") or [] if isinstance(c, dict)]
        if any(d.get("content") or d.get("tool_calls") for d in deltas):
            break
        before.append(n)
    if len(before) == len(chunks):
        raise ctx.skip("the greedy answer has no text to time")
    if len(before) > 1:
        raise field_failure(
            ctx,
            ex,
            f"chunks {before}",
            "several empty chunks before the first text",
            "at most one (the role chunk)",
            f"{len(before)} chunks",
            offending=chunks[before[1]],
        )


@CHECKS.must("stream.matches_nonstream", "concatenated delta.content equals the non-stream content (temperature 0)")
async def matches_nonstream(ctx: Context) -> None:
    ex_s, chunks = await greedy_chat_stream(ctx)
    ex_n, body = await greedy_chat(ctx)
    streamed = by_choice(chunks).get(0)
    content = message_of(body).get("content") or ""
    got = streamed.content if streamed else ""
    if got != content:
        raise field_failure(
            ctx,
            ex_s,
            "delta.content (concatenated)",
            "streamed text differs from the non-stream answer",
            repr(content[:300]),
            repr(got[:300]),
        )
    finish_s = streamed.finishes[0][1] if streamed and streamed.finishes else None
    finish_n = body["choices"][0].get("finish_reason")
    if finish_s != finish_n:
        raise field_failure(
            ctx, ex_s, "finish_reason", "streamed finish_reason differs", repr(finish_n), repr(finish_s)
        )


@CHECKS.must(
    "stream.sdk_strict",
    "the official client validates every chunk and get_final_completion() equals the non-stream answer",
)
async def sdk_stream(ctx: Context) -> None:
    _, body = await greedy_chat(ctx)
    request = ctx.chat_body()
    try:
        final = await sdk_final_completion(ctx, request)
    except openai.APIResponseValidationError as exc:
        raise ctx.fail(
            "the official client rejects a chunk", expected="valid ChatCompletionChunk objects", seen=str(exc)[:500]
        ) from None
    except openai.APIError as exc:
        raise ctx.fail(
            "the official client raised", expected="a clean stream", seen=f"{type(exc).__name__}: {exc}"[:500]
        ) from None
    expected = message_of(body)
    if not final.choices:
        raise ctx.fail("get_final_completion() has no choices", expected="1 choice", seen=repr(final)[:300])
    msg = final.choices[0].message
    if msg.role != "assistant":
        raise ctx.fail("reconstructed role", expected="'assistant'", seen=repr(msg.role), where="message.role")
    if (msg.content or "") != (expected.get("content") or ""):
        raise ctx.fail(
            "reconstructed content differs from the non-stream answer",
            expected=repr(expected.get("content"))[:300],
            seen=repr(msg.content)[:300],
            where="message.content",
        )
    if final.choices[0].finish_reason != body["choices"][0].get("finish_reason"):
        raise ctx.fail(
            "reconstructed finish_reason differs",
            expected=repr(body["choices"][0].get("finish_reason")),
            seen=repr(final.choices[0].finish_reason),
            where="finish_reason",
        )


@CHECKS.must("stream.no_usage_unless_asked", "without include_usage no chunk carries usage and none has empty choices")
async def no_usage_unless_asked(ctx: Context) -> None:
    plain = await greedy_chat_stream(ctx)
    off_ex = await ctx.chat(stream=True, stream_options={"include_usage": False})
    off = (off_ex, ctx.ok_stream(off_ex))
    for ex, chunks in (plain, off):
        if not chunks:
            raise ctx.fail("no chunks to judge", expected="a stream of chunks", seen="none", exchange=ex)
        for n, chunk in enumerate(chunks):
            if chunk.get("usage") is not None:
                raise chunk_failure(
                    ctx,
                    ex,
                    chunk,
                    f"chunk {n}.usage",
                    "usage sent without include_usage",
                    "usage absent or null",
                    repr(chunk.get("usage")),
                )
            if chunk.get("choices") == []:
                raise chunk_failure(
                    ctx,
                    ex,
                    chunk,
                    f"chunk {n}",
                    "an empty-choices chunk breaks chunk.choices[0] loops",
                    "no chunk with choices: []",
                    "choices: []",
                )


def judge_usage_chunk(ctx: Context, ex: Exchange, chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Exactly one usage chunk, last, with choices: [] and a full usage; every
    other chunk has usage null or absent. Returns the usage."""
    with_usage = usage_chunks(chunks)
    if len(with_usage) != 1:
        raise field_failure(
            ctx,
            ex,
            "usage",
            "usage chunk count",
            "exactly one chunk with non-null usage",
            f"{len(with_usage)} (chunks {[n for n, _ in with_usage]})",
        )
    n, chunk = with_usage[0]
    if n != len(chunks) - 1:
        raise chunk_failure(
            ctx,
            ex,
            chunk,
            f"chunk {n}",
            "usage chunk is not last (the official client overwrites usage with later nulls)",
            "the usage chunk just before [DONE]",
            f"chunk {n} of {len(chunks)}",
        )
    if "choices" not in chunk or chunk["choices"] != []:
        raise chunk_failure(
            ctx,
            ex,
            chunk,
            f"chunk {n}.choices",
            "usage chunk choices",
            "choices: [] (key present, empty)",
            repr(chunk.get("choices", "<absent>"))[:200],
        )
    usage = chunk["usage"]
    if not all(isinstance(usage.get(k), int) for k in ("prompt_tokens", "completion_tokens", "total_tokens")):
        raise chunk_failure(
            ctx,
            ex,
            chunk,
            f"chunk {n}.usage",
            "incomplete usage",
            "prompt_tokens, completion_tokens, total_tokens as integers",
            repr(usage),
        )
    if usage["total_tokens"] != usage["prompt_tokens"] + usage["completion_tokens"]:
        raise chunk_failure(
            ctx,
            ex,
            chunk,
            f"chunk {n}.usage.total_tokens",
            "total is not the sum",
            str(usage["prompt_tokens"] + usage["completion_tokens"]),
            str(usage["total_tokens"]),
        )
    return usage


@CHECKS.must(
    "stream.include_usage", "include_usage adds exactly one final chunk with choices [] and full usage, before [DONE]"
)
async def include_usage(ctx: Context) -> None:
    ex = await ctx.chat(stream=True, stream_options={"include_usage": True})
    chunks = ctx.ok_stream(ex)
    judge_usage_chunk(ctx, ex, chunks)
    judge_roles_and_finishes(ctx, ex, chunks[:-1], 1)


@CHECKS.should("stream.usage_matches_nonstream", "the streamed usage equals the non-stream usage for the same request")
async def usage_matches(ctx: Context) -> None:
    ex = await ctx.chat(stream=True, stream_options={"include_usage": True})
    streamed = judge_usage_chunk(ctx, ex, ctx.ok_stream(ex))
    _, body = await greedy_chat(ctx)
    plain = body.get("usage") or {}
    for key in ("prompt_tokens", "completion_tokens"):
        if streamed.get(key) != plain.get(key):
            raise field_failure(
                ctx,
                ex,
                f"usage.{key}",
                "stream and non-stream usage differ",
                f"{key}={plain.get(key)}",
                f"{key}={streamed.get(key)}",
            )


@CHECKS.should("stream.options_without_stream_400", "stream_options with stream=false is refused with 400")
async def options_without_stream(ctx: Context) -> None:
    ex = await ctx.chat(stream=False, stream_options={"include_usage": True})
    ctx.expect_client_error(ex, (400,), "stream_options without stream")


@CHECKS.should(
    "stream.options_unknown_keys_ok", "unknown stream_options keys (continuous_usage_stats) do not cause a 4xx"
)
async def options_unknown_keys(ctx: Context) -> None:
    ex = await ctx.chat(stream=True, stream_options={"include_usage": True, "continuous_usage_stats": False})
    ctx.ok_stream(ex)


@CHECKS.must(
    "completions.stream",
    "a legacy completion stream is framed, text_completion chunks, and concatenates to the non-stream text",
)
async def completions_stream(ctx: Context) -> None:
    ex = await ctx.completion(stream=True)
    chunks = ctx.ok_stream(ex)
    failure = _framing_failure(ex)
    if failure:
        raise failure
    for n, chunk in enumerate(chunks):
        issues = completion_issues(chunk, stream=True)
        if issues:
            raise ctx.field_issues(f"chunk {n} does not match the text_completion shape", issues, ex, chunk)
    streams = by_choice(chunks)
    if sorted(streams) != [0]:
        raise ctx.fail("choice indices", expected="[0]", seen=str(sorted(streams)), exchange=ex)
    if len(streams[0].finishes) != 1:
        raise ctx.fail("finish_reason count", expected="exactly one", seen=str(streams[0].finishes), exchange=ex)
    _, body = await greedy_completion(ctx)
    text = body["choices"][0].get("text") or ""
    if streams[0].content != text:
        raise field_failure(
            ctx,
            ex,
            "choices[0].text (concatenated)",
            "streamed text differs from the non-stream text",
            repr(text[:300]),
            repr(streams[0].content[:300]),
        )


@CHECKS.must(
    "completions.stream_include_usage", "a legacy completion stream with include_usage ends with one usage chunk"
)
async def completions_include_usage(ctx: Context) -> None:
    ex = await ctx.completion(stream=True, stream_options={"include_usage": True})
    judge_usage_chunk(ctx, ex, ctx.ok_stream(ex))
