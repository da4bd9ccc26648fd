"""docs/openai-checklist.md items 34-38: determinism, seeds, range validation, logit_bias, extra fields."""

from __future__ import annotations

from typing import Any

from conformance.check import CheckList
from conformance.checks.common import (
    choice_of,
    field_failure,
    greedy_chat,
    judge_cap,
    judge_same,
    message_of,
    usage_of,
)
from conformance.context import Context
from conformance.result import CheckFailed, Evidence

CHECKS = CheckList("sampling")

# (field overrides, why it is out of range). Each must be refused with a 4xx.
OUT_OF_RANGE: list[tuple[dict[str, Any], str]] = [
    ({"temperature": -0.5}, "temperature < 0"),
    ({"temperature": 2.5}, "temperature > 2"),
    ({"top_p": 1.5}, "top_p > 1"),
    ({"top_p": -0.1}, "top_p < 0"),
    ({"presence_penalty": 2.5}, "presence_penalty > 2"),
    ({"frequency_penalty": -3}, "frequency_penalty < -2"),
    ({"n": 0}, "n < 1"),
    ({"n": 129}, "n > 128"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs > 20"),
    ({"seed": 2**64}, "seed outside int64"),
    ({"max_tokens": -1}, "max_tokens < 1"),
    ({"temperature": "hot"}, "temperature is not a number"),
]


@CHECKS.must("sampling.temperature0_deterministic", "temperature 0 gives the same answer to the same request")
async def deterministic(ctx: Context) -> None:
    ex_a, a = await greedy_chat(ctx)
    ex_b = await ctx.chat()
    b = ctx.ok_json(ex_b)
    ca, cb = message_of(a).get("content"), message_of(b).get("content")
    judge_same(ctx, ex_b, "greedy answers differ", ca, cb, "choices[0].message.content")


@CHECKS.should("sampling.seed_reproducible", "temperature 1 with a fixed seed reproduces the answer")
async def seed_reproducible(ctx: Context) -> None:
    answers = []
    for _ in range(2):
        ex = await ctx.chat(temperature=1.0, seed=4242)
        answers.append((ex, message_of(ctx.ok_json(ex)).get("content")))
    judge_same(ctx, answers[1][0], "seeded answers differ", answers[0][1], answers[1][1], "choices[0].message.content")


@CHECKS.must(
    "sampling.range_validation", "out-of-range sampling values are refused with 400/422 and an error body, never 5xx"
)
async def range_validation(ctx: Context) -> None:
    evidence = []
    for overrides, why in OUT_OF_RANGE:
        ex = await ctx.chat(**overrides)
        try:
            ctx.expect_client_error(ex, (400, 422), why)
        except CheckFailed as exc:
            for e in exc.evidence:
                e.where = why
            evidence.extend(exc.evidence)
    if evidence:
        raise CheckFailed(f"{len(evidence)} of {len(OUT_OF_RANGE)} out-of-range values were not refused", evidence)


@CHECKS.should("sampling.range_status_400", "out-of-range sampling values get 400 exactly (not 422), as OpenAI answers")
async def range_status(ctx: Context) -> None:
    evidence = []
    for overrides, why in OUT_OF_RANGE[:4]:
        ex = await ctx.chat(**overrides)
        if ex.status != 400:
            evidence.append(
                Evidence(expected="HTTP 400", seen=f"HTTP {ex.status}", where=why, request=ex.request_summary())
            )
    if evidence:
        raise CheckFailed("validation errors are not 400", evidence)


@CHECKS.should("sampling.legacy_logprobs_range", "legacy completions logprobs > 5 is refused with 400")
async def legacy_logprobs_range(ctx: Context) -> None:
    ex = await ctx.completion(logprobs=6)
    ctx.expect_client_error(ex, (400, 422), "legacy logprobs=6")


# Ids in the byte range of any byte-level vocabulary; some decode to nothing
# alone (a partial UTF-8 byte), so several are tried.
BIAS_CANDIDATES = (100, 120, 140, 160, 180, 200, 220, 240)


@CHECKS.should("sampling.logit_bias_forces", "logit_bias +100 on one token id makes greedy decoding repeat that token")
async def logit_bias_forces(ctx: Context) -> None:
    max_tokens = 4
    for token_id in BIAS_CANDIDATES:
        ex = await ctx.chat(logit_bias={str(token_id): 100}, max_tokens=max_tokens)
        body = ctx.ok_json(ex)
        content = message_of(body).get("content") or ""
        usage = usage_of(body, ex)
        if choice_of(body).get("finish_reason") != "length" or usage["completion_tokens"] != max_tokens or not content:
            continue  # an end-of-text or partial-byte token: no visible repetition to judge
        piece = content[: len(content) // max_tokens]
        if piece * max_tokens != content:
            raise field_failure(
                ctx,
                ex,
                "choices[0].message.content",
                "logit_bias had no visible effect",
                f"token {token_id}'s text repeated {max_tokens} times",
                repr(content)[:300],
            )
        return
    raise ctx.skip(f"no token among {BIAS_CANDIDATES} decodes to visible text over {max_tokens} tokens")


@CHECKS.should(
    "sampling.logit_bias_invalid_400", "logit_bias naming a token id outside the vocabulary is refused with 400"
)
async def logit_bias_invalid(ctx: Context) -> None:
    ex = await ctx.chat(logit_bias={"999999999": 5})
    ctx.expect_client_error(ex, (400, 422), "logit_bias with token id 999999999")


@CHECKS.should(
    "sampling.extra_fields_ignored",
    "benchmark-client extras (ignore_eos, min_tokens, repetition_penalty, unknown keys) are not refused",
)
async def extra_fields(ctx: Context) -> None:
    ex = await ctx.chat(
        ignore_eos=False, min_tokens=1, repetition_penalty=1.0, conformance_unknown_field="x", user="conformance"
    )
    ctx.ok_json(ex, "request with extra fields")


@CHECKS.should(
    "sampling.ignore_eos_exact", "ignore_eos true yields exactly max_tokens tokens with finish_reason length"
)
async def ignore_eos(ctx: Context) -> None:
    ex = await ctx.chat(ignore_eos=True, max_tokens=24)
    expected = "24 completion tokens, finish_reason length"
    judge_cap(ctx, ex, ctx.ok_json(ex), "ignore_eos not honoured", 24, expected, ("length",))
