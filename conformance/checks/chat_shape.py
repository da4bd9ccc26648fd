"""docs/openai-checklist.md items 5-9 and 23 (non-stream shapes): chat and legacy completions."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any

import openai

from conformance.check import CheckList
from conformance.checks.common import (
    choice_of,
    field_failure,
    greedy_chat,
    greedy_completion,
    judge_no_tool_calls,
    usage_failure,
)
from conformance.context import DROP, Context
from conformance.schema import chat_completion_issues, completion_issues

CHECKS = CheckList("response")

CREATED_TOLERANCE_S = 300  # clocks of test machines and servers drift; a unit error (ms) is far beyond this


async def _sdk_strict(ctx: Context, call: Awaitable[Any], parsed_as: str) -> Any:
    """What the official client, validating strictly, parses the answer to `call` as."""
    try:
        return await call
    except openai.APIResponseValidationError as exc:
        raise ctx.fail(
            "the official client rejects the response", expected=f"a valid {parsed_as}", seen=str(exc)[:500]
        ) from None
    except openai.APIStatusError as exc:
        raise ctx.fail(f"HTTP {exc.status_code}", expected="HTTP 200", seen=str(exc)[:500]) from None


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
        raise field_failure(
            ctx,
            ex,
            "choices",
            "wrong number of choices",
            "1 choice (n defaults to 1)",
            f"{len(choices)}",
            offending=body,
        )
    choice = choice_of(body)
    if choice.get("index") != 0:
        raise field_failure(
            ctx, ex, "choices[0].index", "choice index", "0", repr(choice.get("index")), offending=choice
        )
    if choice.get("logprobs") is not None:
        raise field_failure(
            ctx, ex, "choices[0].logprobs", "logprobs without asking", "null", repr(choice.get("logprobs"))[:200]
        )
    if choice.get("finish_reason") not in ("stop", "length"):
        raise field_failure(
            ctx,
            ex,
            "choices[0].finish_reason",
            "finish_reason of a plain answer",
            "stop or length",
            repr(choice.get("finish_reason")),
        )
    judge_no_tool_calls(ctx, ex, body, "tool calls without tools", limit=200)
    created = body.get("created")
    if isinstance(created, int) and abs(created - time.time()) > CREATED_TOLERANCE_S:
        raise field_failure(
            ctx,
            ex,
            "created",
            "created is not the current unix time in seconds",
            f"within {CREATED_TOLERANCE_S}s of now",
            f"{created} (now {int(time.time())})",
        )


@CHECKS.should("chat.response.model_echo", "the response's model is the name the client sent")
async def chat_model_echo(ctx: Context) -> None:
    ex, body = await greedy_chat(ctx)
    if body.get("model") != ctx.target.model:
        raise field_failure(
            ctx, ex, "model", "model differs from the request", repr(ctx.target.model), repr(body.get("model"))
        )


@CHECKS.should("chat.response.id_prefix", "the response id looks like OpenAI's (chatcmpl-…)")
async def chat_id_prefix(ctx: Context) -> None:
    ex, body = await greedy_chat(ctx)
    if not str(body.get("id", "")).startswith("chatcmpl-"):
        raise field_failure(ctx, ex, "id", "id format", "'chatcmpl-…'", repr(body.get("id")))


@CHECKS.must("chat.response.sdk_strict", "the official client with strict validation parses the chat completion")
async def chat_sdk_strict(ctx: Context) -> None:
    result = await _sdk_strict(ctx, ctx.sdk.chat.completions.create(**ctx.chat_body()), "ChatCompletion")
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
        raise field_failure(ctx, ex, "choices", "wrong number of choices", "1", str(len(body.get("choices") or [])))


@CHECKS.must(
    "completions.response.sdk_strict", "the official client with strict validation parses the legacy completion"
)
async def completion_sdk_strict(ctx: Context) -> None:
    result = await _sdk_strict(ctx, ctx.sdk.completions.create(**ctx.completion_body()), "Completion")
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
