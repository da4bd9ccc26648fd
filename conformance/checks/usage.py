"""docs/openai-checklist.md items 10-14: usage accounting."""

from __future__ import annotations

from conformance.check import CheckList
from conformance.checks.common import (
    choice_of,
    greedy_chat,
    greedy_completion,
    judge_total,
    usage_failure,
    usage_of,
)
from conformance.context import Context
from conformance.schema import usage_issues

CHECKS = CheckList("usage")


@CHECKS.must("usage.chat.totals", "chat usage has integer counts and total = prompt + completion")
async def chat_totals(ctx: Context) -> None:
    ex, body = await greedy_chat(ctx)
    usage = usage_of(body, ex)
    issues = usage_issues(usage)
    if issues:
        raise ctx.field_issues("usage does not match CompletionUsage", issues, ex, usage)
    judge_total(ctx, ex, usage)
    if usage["prompt_tokens"] <= 0:
        raise usage_failure(ctx, ex, usage, "prompt_tokens", "no prompt tokens counted", "prompt_tokens > 0")


@CHECKS.must("usage.completions.totals", "legacy completion usage has integer counts and total = prompt + completion")
async def completion_totals(ctx: Context) -> None:
    ex, body = await greedy_completion(ctx)
    judge_total(ctx, ex, usage_of(body, ex))


@CHECKS.must("usage.matches_max_tokens", "completion_tokens == max_tokens when finish_reason is length, ≤ otherwise")
async def matches_max_tokens(ctx: Context) -> None:
    for max_tokens in (1, 5):
        ex = await ctx.chat(max_tokens=max_tokens)
        body = ctx.ok_json(ex)
        usage = usage_of(body, ex)
        finish = choice_of(body).get("finish_reason")
        tokens = usage["completion_tokens"]
        if finish == "length" and tokens != max_tokens:
            message, expected = (
                "a length finish must have used exactly max_tokens",
                f"completion_tokens == {max_tokens}",
            )
        elif tokens > max_tokens:
            message, expected = "more tokens than max_tokens", f"completion_tokens <= {max_tokens}"
        else:
            continue
        raise usage_failure(ctx, ex, usage, "completion_tokens", message, expected, show_usage=True)


@CHECKS.should(
    "usage.prompt_tokens_consistent", "prompt_tokens is the same for identical prompts and grows with the prompt"
)
async def prompt_tokens_consistent(ctx: Context) -> None:
    ex_a, body_a = await greedy_chat(ctx)
    ex_b = await ctx.chat(max_tokens=2)
    long_prompt = "Tell me a short story about a quick brown fox. " * 4
    ex_c = await ctx.chat(max_tokens=2, messages=[{"role": "user", "content": long_prompt}])
    a, b, c = (usage_of(body_a, ex_a), usage_of(ctx.ok_json(ex_b), ex_b), usage_of(ctx.ok_json(ex_c), ex_c))
    if a["prompt_tokens"] != b["prompt_tokens"]:
        message = "the same prompt was counted differently"
        raise usage_failure(ctx, ex_b, b, "prompt_tokens", message, f"prompt_tokens {a['prompt_tokens']}")
    if c["prompt_tokens"] <= a["prompt_tokens"]:
        message = "a four-times longer prompt did not count more tokens"
        raise usage_failure(ctx, ex_c, c, "prompt_tokens", message, f"> {a['prompt_tokens']}")


@CHECKS.should(
    "usage.cached_tokens", "prompt_tokens_details.cached_tokens, when reported, is ≤ prompt_tokens and > 0 on a repeat"
)
async def cached_tokens(ctx: Context) -> None:
    messages = [{"role": "user", "content": "Cache probe: " + "the quick brown fox jumps over the lazy dog " * 12}]
    first = await ctx.chat(messages=messages, max_tokens=1)
    second = await ctx.chat(messages=messages, max_tokens=1)
    details = []
    for ex in (first, second):
        usage = usage_of(ctx.ok_json(ex), ex)
        d = usage.get("prompt_tokens_details")
        cached = d.get("cached_tokens") if isinstance(d, dict) else None
        details.append((ex, usage, cached))
    if all(cached is None for _, _, cached in details):
        raise ctx.skip("the server does not report prompt_tokens_details.cached_tokens")
    field = "prompt_tokens_details.cached_tokens"
    for ex, usage, cached in details:
        if not isinstance(cached, int) or not 0 <= cached <= usage["prompt_tokens"]:
            expected = f"an integer in [0, {usage['prompt_tokens']}]"
            message = "cached_tokens out of range"
            raise usage_failure(ctx, ex, usage, field, message, expected, seen=repr(cached), show_usage=True)
    ex, usage, cached = details[1]
    if cached == 0:
        message = "an identical second request reported no cached tokens"
        raise usage_failure(ctx, ex, usage, field, message, "cached_tokens > 0", seen="0", show_usage=True)


@CHECKS.should("usage.n_aggregated", "with n>1 usage counts the prompt once and sums completion tokens")
async def n_aggregated(ctx: Context) -> None:
    max_tokens = 4
    ex1 = await ctx.chat(max_tokens=max_tokens)
    ex2 = await ctx.chat(max_tokens=max_tokens, n=2, temperature=1.0)
    one = usage_of(ctx.ok_json(ex1), ex1)
    body = ctx.ok_json(ex2)
    if len(body.get("choices") or []) != 2:
        raise ctx.skip(f"n=2 returned {len(body.get('choices') or [])} choice(s) (n.nonstream judges that)")
    two = usage_of(body, ex2)
    if two["prompt_tokens"] != one["prompt_tokens"]:
        expected = f"prompt_tokens {one['prompt_tokens']} as with n=1"
        raise usage_failure(
            ctx, ex2, two, "prompt_tokens", "the prompt was not counted once", expected, show_usage=True
        )
    lengths = sum(1 for c in body.get("choices") or [] if c.get("finish_reason") == "length")
    low, high = lengths * max_tokens, 2 * max_tokens
    if not low <= two["completion_tokens"] <= high:
        expected = f"between {low} and {high} ({lengths} choice(s) hit max_tokens={max_tokens})"
        message = "completion tokens are not summed over choices"
        raise usage_failure(ctx, ex2, two, "completion_tokens", message, expected, show_usage=True)
