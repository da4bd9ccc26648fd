"""docs/openai-checklist.md items 5-9 and 23 (non-stream shapes): chat and legacy completions."""

from __future__ import annotations

import time

import openai

from conformance.check import CheckList
from conformance.checks.common import choice_of, greedy_chat, greedy_completion, judge_no_tool_calls, usage_failure
from conformance.context import DROP, Context
from conformance.schema import chat_completion_issues, completion_issues

CHECKS = CheckList("response")

CREATED_TOLERANCE_S = 300  # clocks of test machines and servers drift; a unit error (ms) is far beyond this


@CHECKS.must("chat.response.schema", "a chat completion has every required field, typed, with no forbidden nulls")
async def chat_schema(ctx: Context) -> None:
    ex, body = await greedy_chat(ctx)
    issues = chat_completion_issues(body)
    if issues:
        raise ctx.field_issues("the chat completion does not match CreateChatCompletionResponse", issues, ex, body)


@CHECKS.must(
    "chat.response.values",
    "one choice with index 0, role assistant, a known finish_reason, logprobs null, created ≈ now",
)
async def chat_values(ctx: Context) -> None:
    ex, body = await greedy_chat(ctx)
    choices = body.get("choices") or []
    if len(choices) != 1:
        raise ctx.fail(
            "wrong number of choices",
            expected="1 choice (n defaults to 1)",
            seen=f"{len(choices)}",
            where="choices",
            offending=body,
            exchange=ex,
        )
    choice = choice_of(body)
    if choice.get("index") != 0:
        raise ctx.fail(
            "choice index",
            expected="0",
            seen=repr(choice.get("index")),
            where="choices[0].index",
            offending=choice,
            exchange=ex,
        )
    if choice.get("logprobs") is not None:
        raise ctx.fail(
            "logprobs without asking",
            expected="null",
            seen=repr(choice.get("logprobs"))[:200],
            where="choices[0].logprobs",
            exchange=ex,
        )
    if choice.get("finish_reason") not in ("stop", "length"):
        raise ctx.fail(
            "finish_reason of a plain answer",
            expected="stop or length",
            seen=repr(choice.get("finish_reason")),
            where="choices[0].finish_reason",
            exchange=ex,
        )
    judge_no_tool_calls(ctx, ex, body, "tool calls without tools", limit=200)
    created = body.get("created")
    if isinstance(created, int) and abs(created - time.time()) > CREATED_TOLERANCE_S:
        raise ctx.fail(
            "created is not the current unix time in seconds",
            expected=f"within {CREATED_TOLERANCE_S}s of now",
            seen=f"{created} (now {int(time.time())})",
            where="created",
            exchange=ex,
        )


@CHECKS.should("chat.response.model_echo", "the response's model is the name the client sent")
async def chat_model_echo(ctx: Context) -> None:
    ex, body = await greedy_chat(ctx)
    if body.get("model") != ctx.target.model:
        raise ctx.fail(
            "model differs from the request",
            expected=repr(ctx.target.model),
            seen=repr(body.get("model")),
            where="model",
            exchange=ex,
        )


@CHECKS.should("chat.response.id_prefix", "the response id looks like OpenAI's (chatcmpl-…)")
async def chat_id_prefix(ctx: Context) -> None:
    ex, body = await greedy_chat(ctx)
    if not str(body.get("id", "")).startswith("chatcmpl-"):
        raise ctx.fail("id format", expected="'chatcmpl-…'", seen=repr(body.get("id")), where="id", exchange=ex)


@CHECKS.must("chat.response.sdk_strict", "the official client with strict validation parses the chat completion")
async def chat_sdk_strict(ctx: Context) -> None:
    body = ctx.chat_body()
    try:
        result = await ctx.sdk.chat.completions.create(**body)
    except openai.APIResponseValidationError as exc:
        raise ctx.fail(
            "the official client rejects the response", expected="a valid ChatCompletion", seen=str(exc)[:500]
        ) from None
    except openai.APIStatusError as exc:
        raise ctx.fail(f"HTTP {exc.status_code}", expected="HTTP 200", seen=str(exc)[:500]) from None
    if result.object != "chat.completion" or not result.choices:
        raise ctx.fail("unexpected parsed object", expected="chat.completion with choices", seen=repr(result)[:300])


@CHECKS.must(
    "completions.response.schema", "a legacy completion has every required field (text, index, logprobs, finish_reason)"
)
async def completion_schema(ctx: Context) -> None:
    ex, body = await greedy_completion(ctx)
    issues = completion_issues(body, stream=False)
    if issues:
        raise ctx.field_issues("the completion does not match CreateCompletionResponse", issues, ex, body)
    if len(body.get("choices") or []) != 1:
        raise ctx.fail(
            "wrong number of choices",
            expected="1",
            seen=str(len(body.get("choices") or [])),
            where="choices",
            exchange=ex,
        )


@CHECKS.must(
    "completions.response.sdk_strict", "the official client with strict validation parses the legacy completion"
)
async def completion_sdk_strict(ctx: Context) -> None:
    body = ctx.completion_body()
    try:
        result = await ctx.sdk.completions.create(**body)
    except openai.APIResponseValidationError as exc:
        raise ctx.fail(
            "the official client rejects the response", expected="a valid Completion", seen=str(exc)[:500]
        ) from None
    except openai.APIStatusError as exc:
        raise ctx.fail(f"HTTP {exc.status_code}", expected="HTTP 200", seen=str(exc)[:500]) from None
    if result.object != "text_completion":
        raise ctx.fail("unexpected parsed object", expected="text_completion", seen=repr(result)[:300])


@CHECKS.should("completions.default_max_tokens", "legacy completions without max_tokens stop at 16 tokens")
async def completion_default_max_tokens(ctx: Context) -> None:
    ex = await ctx.completion(max_tokens=DROP)
    body = ctx.ok_json(ex)
    usage = body.get("usage") or {}
    tokens = usage.get("completion_tokens")
    if not isinstance(tokens, int):
        raise ctx.skip("needs usage.completion_tokens to count the answer")
    if tokens > 16:
        expected = "at most 16 completion tokens (the spec default)"
        raise usage_failure(ctx, ex, usage, "completion_tokens", "default max_tokens", expected)
