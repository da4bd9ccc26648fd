"""docs/openai-checklist.md items 48-49: log probabilities, chat and legacy."""

from __future__ import annotations

from typing import Any

from conformance.check import CheckList
from conformance.checks.common import by_choice, choice_of, field_failure, judge_same, usage_of
from conformance.context import Context
from conformance.http import Exchange
from conformance.schema import chat_completion_issues

CHECKS = CheckList("logprobs")

LP_MAX_TOKENS = 4
TOP = 2


async def _chat_logprobs(ctx: Context) -> tuple[Exchange, dict[str, Any]]:
    if "logprobs.chat" not in ctx.memo:
        ex = await ctx.chat(logprobs=True, top_logprobs=TOP, max_tokens=LP_MAX_TOKENS)
        ctx.memo["logprobs.chat"] = (ex, ctx.ok_json(ex))
    return ctx.memo["logprobs.chat"]


@CHECKS.must(
    "logprobs.chat", "logprobs=true gives one entry per token with token, logprob ≤ 0, bytes, sorted top_logprobs"
)
async def chat(ctx: Context) -> None:
    ex, body = await _chat_logprobs(ctx)
    issues = chat_completion_issues(body)
    if issues:
        raise ctx.field_issues("logprobs do not match ChatCompletionTokenLogprob", issues, ex, body)
    lp = choice_of(body).get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list) or not content:
        raise field_failure(
            ctx,
            ex,
            "choices[0].logprobs",
            "no logprobs",
            "choices[0].logprobs.content, a non-empty array",
            repr(lp)[:300],
        )
    usage = usage_of(body, ex)
    if choice_of(body).get("finish_reason") == "length" and len(content) != usage["completion_tokens"]:
        raise field_failure(
            ctx,
            ex,
            "choices[0].logprobs.content",
            "one entry per generated token",
            f"{usage['completion_tokens']} entries",
            f"{len(content)}",
        )
    for i, entry in enumerate(content):
        tops = entry.get("top_logprobs")
        where = f"choices[0].logprobs.content[{i}].top_logprobs"
        if not isinstance(tops, list) or not 1 <= len(tops) <= TOP:
            raise field_failure(ctx, ex, where, "top_logprobs length", f"1..{TOP} entries", repr(tops)[:300])
        values = [t.get("logprob") for t in tops]
        if values != sorted(values, reverse=True):
            raise field_failure(ctx, ex, where, "top_logprobs not sorted", "descending logprob", str(values))


@CHECKS.should("logprobs.top_exact", "top_logprobs=k gives exactly k alternatives per token")
async def top_exact(ctx: Context) -> None:
    ex, body = await _chat_logprobs(ctx)
    lp = choice_of(body).get("logprobs") or {}
    if not lp.get("content"):
        raise ctx.fail("no logprobs to count", expected="choices[0].logprobs.content", seen=repr(lp)[:200], exchange=ex)
    for i, entry in enumerate(lp.get("content") or []):
        if len(entry.get("top_logprobs") or []) != TOP:
            raise field_failure(
                ctx,
                ex,
                f"choices[0].logprobs.content[{i}].top_logprobs",
                "top_logprobs count",
                f"{TOP}",
                str(len(entry.get("top_logprobs") or [])),
            )


@CHECKS.should("logprobs.stream_matches", "streamed logprobs concatenate to the non-stream list (same tokens)")
async def stream_matches(ctx: Context) -> None:
    ex_n, body = await _chat_logprobs(ctx)
    plain = [e.get("token") for e in (choice_of(body).get("logprobs") or {}).get("content") or []]
    if not plain:
        raise ctx.skip("the non-stream answer has no logprobs to compare with (logprobs.chat judges that)")
    ex = await ctx.chat(logprobs=True, top_logprobs=TOP, max_tokens=LP_MAX_TOKENS, stream=True)
    streams = by_choice(ctx.ok_stream(ex))
    streamed = [e.get("token") for e in streams[0].logprobs] if 0 in streams else []
    judge_same(ctx, ex, "streamed logprob tokens differ", plain, streamed, "choices[0].logprobs.content (concatenated)")


@CHECKS.must("logprobs.off_by_default", "without logprobs the streamed chunks carry no logprobs content")
async def off_by_default(ctx: Context) -> None:
    ex = await ctx.chat(stream=True)
    streams = by_choice(ctx.ok_stream(ex))
    if 0 in streams and streams[0].logprobs:
        raise field_failure(
            ctx,
            ex,
            "choices[0].logprobs",
            "logprobs without asking",
            "logprobs null or absent",
            repr(streams[0].logprobs[:2])[:300],
        )


@CHECKS.should(
    "logprobs.completions", "legacy logprobs=2: tokens, token_logprobs, top_logprobs, text_offset of equal length"
)
async def completions(ctx: Context) -> None:
    ex = await ctx.completion(logprobs=TOP, max_tokens=LP_MAX_TOKENS)
    body = ctx.ok_json(ex)
    lp = choice_of(body).get("logprobs")
    if not isinstance(lp, dict):
        raise ctx.fail("no logprobs", expected="choices[0].logprobs object", seen=repr(lp)[:300], exchange=ex)
    lengths = {k: len(lp.get(k) or []) for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    if len(set(lengths.values())) != 1 or not lengths["tokens"]:
        raise field_failure(
            ctx, ex, "choices[0].logprobs", "logprobs arrays differ in length", "equal, non-zero lengths", str(lengths)
        )
    for i, top in enumerate(lp.get("top_logprobs") or []):
        if not isinstance(top, dict) or not 1 <= len(top) <= TOP + 1:
            raise field_failure(
                ctx,
                ex,
                f"choices[0].logprobs.top_logprobs[{i}]",
                "top_logprobs entry",
                f"a dict of {TOP} or {TOP + 1} token: logprob",
                repr(top)[:200],
            )


@CHECKS.should(
    "logprobs.completions_echo", "legacy echo with logprobs returns the prompt first, its first token_logprob null"
)
async def completions_echo(ctx: Context) -> None:
    ex = await ctx.completion(echo=True, logprobs=1, max_tokens=2)
    ctx.skip_if_unsupported(ex, "echo")
    body = ctx.ok_json(ex)
    choice = choice_of(body)
    text = choice.get("text") or ""
    if not text.startswith(ctx.completion_body()["prompt"]):
        raise field_failure(
            ctx,
            ex,
            "choices[0].text",
            "echo did not return the prompt",
            "text starting with the prompt",
            repr(text)[:200],
        )
    lp = choice.get("logprobs")
    values = lp.get("token_logprobs") if isinstance(lp, dict) else None
    if not isinstance(values, list) or not values or values[0] is not None:
        raise field_failure(
            ctx,
            ex,
            "choices[0].logprobs.token_logprobs",
            "the first echoed token has no logprob to give",
            "token_logprobs[0] is null",
            repr(values[:3] if isinstance(values, list) else values),
        )
