"""docs/openai-checklist.md items 39-41: n > 1, streamed and not."""

from __future__ import annotations

import openai

from conformance.check import CheckList
from conformance.checks.common import (
    field_failure,
    greedy_chat,
    sdk_final_completion,
    sdk_stream_failure,
    usage_failure,
    usage_of,
)
from conformance.checks.streaming import judge_roles_and_finishes, judge_usage_chunk
from conformance.context import Context

CHECKS = CheckList("n")

N = 3
N_MAX_TOKENS = 8


@CHECKS.must("n.nonstream", "n=3 returns 3 choices with indices 0, 1, 2, each with a message and a finish_reason")
async def nonstream(ctx: Context) -> None:
    ex = await ctx.chat(n=N, temperature=1.0, max_tokens=N_MAX_TOKENS)
    body = ctx.ok_json(ex)
    choices = body.get("choices") or []
    indices = [c.get("index") for c in choices if isinstance(c, dict)]
    if indices != list(range(N)):
        raise field_failure(
            ctx,
            ex,
            "choices[].index",
            "choices for n=3",
            f"indices {list(range(N))} in order",
            str(indices),
            offending=body,
        )
    for i, c in enumerate(choices):
        if not isinstance(c.get("message"), dict) or c.get("finish_reason") not in ("stop", "length"):
            raise field_failure(
                ctx, ex, f"choices[{i}]", "incomplete choice", "a message and finish_reason stop|length", repr(c)[:300]
            )
    ctx.memo["n.nonstream"] = body


@CHECKS.should("n.diverse", "n=3 at temperature 1 gives different answers, not one answer copied")
async def diverse(ctx: Context) -> None:
    body = ctx.memo.get("n.nonstream")
    if body is None:
        ex = await ctx.chat(n=N, temperature=1.0, max_tokens=N_MAX_TOKENS)
        body = ctx.ok_json(ex)
    texts = [(c.get("message") or {}).get("content") for c in body.get("choices") or []]
    if len(texts) != N:
        raise ctx.skip(f"n={N} returned {len(texts)} choice(s) (n.nonstream judges that)")
    if len(set(texts)) == 1:
        raise ctx.fail("all choices are identical", expected="diverse answers at temperature 1", seen=repr(texts)[:300])


@CHECKS.must("n.stream", "a streamed n=3 gives each index one role delta first and exactly one finish_reason")
async def stream(ctx: Context) -> None:
    ex = await ctx.chat(n=N, temperature=1.0, max_tokens=N_MAX_TOKENS, stream=True)
    judge_roles_and_finishes(ctx, ex, ctx.ok_stream(ex), N)


@CHECKS.must("n.stream_usage", "a streamed n=3 with include_usage ends with one usage chunk covering all choices")
async def stream_usage(ctx: Context) -> None:
    ex = await ctx.chat(
        n=N, temperature=1.0, max_tokens=N_MAX_TOKENS, stream=True, stream_options={"include_usage": True}
    )
    chunks = ctx.ok_stream(ex)
    usage = judge_usage_chunk(ctx, ex, chunks)
    judge_roles_and_finishes(ctx, ex, chunks[:-1], N)
    ex1, one = await greedy_chat(ctx)
    if usage["prompt_tokens"] != usage_of(one, ex1)["prompt_tokens"]:
        expected = f"prompt_tokens {one['usage']['prompt_tokens']}"
        raise usage_failure(ctx, ex, usage, "prompt_tokens", "the prompt was not counted once", expected)
    if not N <= usage["completion_tokens"] <= N * N_MAX_TOKENS:
        message, expected = "completion tokens do not cover all choices", f"between {N} and {N * N_MAX_TOKENS}"
        raise usage_failure(ctx, ex, usage, "completion_tokens", message, expected)


@CHECKS.must("n.sdk_stream", "the official client's get_final_completion() rebuilds all n=2 choices")
async def sdk_stream(ctx: Context) -> None:
    request = ctx.chat_body(n=2, temperature=1.0, max_tokens=N_MAX_TOKENS)
    try:
        final = await sdk_final_completion(ctx, request)
    except (openai.APIError, IndexError, AssertionError) as exc:
        raise sdk_stream_failure(ctx, exc) from None
    got = [(c.index, c.message.role, c.finish_reason) for c in final.choices]
    if [g[0] for g in got] != [0, 1] or any(g[1] != "assistant" or g[2] not in ("stop", "length") for g in got):
        raise ctx.fail("rebuilt choices", expected="indices [0, 1], role assistant, finish stop|length", seen=str(got))
