"""docs/openai-checklist.md items 45-47: max_completion_tokens / max_tokens and the context window."""

from __future__ import annotations

from conformance.check import CheckList
from conformance.checks.common import (
    choice_of,
    field_failure,
    greedy_chat,
    judge_cap,
    usage_failure,
    usage_of,
)
from conformance.context import DROP, Context

CHECKS = CheckList("max_tokens")

# Far beyond the context of any model this suite meets (~1 token per word on a
# byte-level tokenizer is a floor), yet a small body (~300 KB).
OVERLONG_WORDS = 50_000


async def _baseline_ran_to(ctx: Context, tokens: int) -> bool:
    """Whether the greedy answer ran past `tokens` (so capping it must bite)."""
    ex, body = await greedy_chat(ctx)
    return usage_of(body, ex)["completion_tokens"] > tokens


@CHECKS.must("max_tokens.max_completion_tokens", "max_completion_tokens is accepted and caps the answer")
async def max_completion_tokens(ctx: Context) -> None:
    ex = await ctx.chat(max_tokens=DROP, max_completion_tokens=3)
    body = ctx.ok_json(ex)
    usage = usage_of(body, ex)
    if usage["completion_tokens"] > 3:
        expected = "at most 3 completion tokens"
        raise usage_failure(ctx, ex, usage, "completion_tokens", "max_completion_tokens ignored", expected)
    if await _baseline_ran_to(ctx, 3):
        judge_cap(ctx, ex, body, "the cap did not end the answer", 3, "3 tokens, finish_reason length", ("length",))


@CHECKS.should("max_tokens.precedence", "with both set, max_completion_tokens wins over the deprecated max_tokens")
async def precedence(ctx: Context) -> None:
    if not await _baseline_ran_to(ctx, 6):
        raise ctx.skip("the greedy answer is too short to tell the two limits apart")
    ex = await ctx.chat(max_tokens=6, max_completion_tokens=3)
    usage = usage_of(ctx.ok_json(ex), ex)
    if usage["completion_tokens"] != 3:
        message = "max_completion_tokens did not take precedence"
        raise usage_failure(ctx, ex, usage, "completion_tokens", message, "3 completion tokens")


@CHECKS.must("max_tokens.one", "max_tokens=1 yields exactly one token (finish_reason length unless the model stopped)")
async def one(ctx: Context) -> None:
    ex = await ctx.chat(max_tokens=1)
    expected = "1 completion token, finish_reason length (or stop on EOS)"
    judge_cap(ctx, ex, ctx.ok_json(ex), "max_tokens=1", 1, expected, ("length", "stop"))


@CHECKS.must("max_tokens.prompt_too_long", "a prompt longer than the context is refused with 400, never 5xx")
async def prompt_too_long(ctx: Context) -> None:
    ex = await ctx.chat(messages=[{"role": "user", "content": "fox " * OVERLONG_WORDS}], max_tokens=4)
    ctx.memo["max_tokens.prompt_too_long"] = ex
    ctx.expect_client_error(ex, (400, 413, 422), "a prompt beyond the context window")


@CHECKS.should("max_tokens.context_code", "a prompt beyond the context gets code context_length_exceeded")
async def context_code(ctx: Context) -> None:
    ex = ctx.memo.get("max_tokens.prompt_too_long") or await ctx.chat(
        messages=[{"role": "user", "content": "fox " * OVERLONG_WORDS}], max_tokens=4
    )
    body = ex.json()
    code = (
        (body.get("error") or {}).get("code")
        if isinstance(body, dict) and isinstance(body.get("error"), dict)
        else None
    )
    if code != "context_length_exceeded":
        raise field_failure(ctx, ex, "error.code", "error code", "'context_length_exceeded'", repr(code))


@CHECKS.must("max_tokens.huge_no_5xx", "max_tokens far beyond the context is refused (400) or clamped (200), never 5xx")
async def huge(ctx: Context) -> None:
    ex = await ctx.chat(max_tokens=10**9, stop=["."])
    if ex.status == 200:
        body = ctx.ok_json(ex)
        if choice_of(body).get("finish_reason") not in ("stop", "length"):
            raise ctx.fail(
                "clamped answer",
                expected="finish_reason stop|length",
                seen=repr(choice_of(body).get("finish_reason")),
                exchange=ex,
            )
        return
    ctx.expect_client_error(ex, (400, 422), "max_tokens=1e9")
