"""Helpers shared by the check modules: memoized baselines and stream views."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai

from conformance.context import Context
from conformance.http import Exchange
from conformance.result import CheckFailed, Evidence


async def greedy_chat(ctx: Context) -> tuple[Exchange, dict[str, Any]]:
    """The reference non-stream answer (temperature 0, seeded), fetched once."""
    if "greedy_chat" not in ctx.memo:
        ex = await ctx.chat()
        ctx.memo["greedy_chat"] = (ex, ctx.ok_json(ex, "baseline chat completion"))
    return ctx.memo["greedy_chat"]


async def greedy_chat_stream(ctx: Context) -> tuple[Exchange, list[dict[str, Any]]]:
    """The same request streamed (no stream_options), fetched once."""
    if "greedy_chat_stream" not in ctx.memo:
        ex = await ctx.chat(stream=True)
        ctx.memo["greedy_chat_stream"] = (ex, ctx.ok_stream(ex, "baseline chat stream"))
    return ctx.memo["greedy_chat_stream"]


async def greedy_completion(ctx: Context) -> tuple[Exchange, dict[str, Any]]:
    if "greedy_completion" not in ctx.memo:
        ex = await ctx.completion()
        ctx.memo["greedy_completion"] = (ex, ctx.ok_json(ex, "baseline completion"))
    return ctx.memo["greedy_completion"]


@dataclass(slots=True)
class ChoiceStream:
    """Everything one choice index received over a stream."""

    content: str = ""
    roles: list[tuple[int, Any]] = field(default_factory=list)  # (chunk number, role value)
    finishes: list[tuple[int, Any]] = field(default_factory=list)  # (chunk number, finish_reason)
    chunk_numbers: list[int] = field(default_factory=list)
    content_after_finish: list[int] = field(default_factory=list)
    tool_deltas: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)


def by_choice(chunks: list[dict[str, Any]]) -> dict[int, ChoiceStream]:
    """Group stream chunks by choice index (chunks with odd shapes are skipped
    here; the shape checks report them)."""
    out: dict[int, ChoiceStream] = {}
    for n, chunk in enumerate(chunks):
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or not isinstance(choice.get("index"), int):
                continue
            cs = out.setdefault(choice["index"], ChoiceStream())
            cs.chunk_numbers.append(n)
            delta: dict[str, Any] = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
            if "role" in delta:
                cs.roles.append((n, delta["role"]))
            text = delta.get("content")
            if text is None:
                text = choice.get("text")  # legacy completions
            if isinstance(text, str) and text:
                if cs.finishes:
                    cs.content_after_finish.append(n)
                cs.content += text
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    cs.tool_deltas.append((n, call))
            lp = choice.get("logprobs")
            if isinstance(lp, dict) and isinstance(lp.get("content"), list):
                cs.logprobs.extend(x for x in lp["content"] if isinstance(x, dict))
            if choice.get("finish_reason") is not None:
                cs.finishes.append((n, choice["finish_reason"]))
    return out


def message_of(body: dict[str, Any], index: int = 0) -> dict[str, Any]:
    try:
        msg = body["choices"][index]["message"]
    except (KeyError, IndexError, TypeError):
        raise CheckFailed(
            f"no choices[{index}].message", [Evidence(expected=f"choices[{index}].message", seen=repr(body)[:300])]
        ) from None
    if not isinstance(msg, dict):
        raise CheckFailed(
            f"choices[{index}].message is not an object", [Evidence(expected="an object", seen=repr(msg)[:300])]
        )
    return msg


def choice_of(body: dict[str, Any], index: int = 0) -> dict[str, Any]:
    try:
        choice = body["choices"][index]
    except (KeyError, IndexError, TypeError):
        raise CheckFailed(
            f"no choices[{index}]", [Evidence(expected=f"choices[{index}]", seen=repr(body)[:300])]
        ) from None
    return choice


def usage_of(body: dict[str, Any], ex: Exchange) -> dict[str, int]:
    usage = body.get("usage")
    if not isinstance(usage, dict) or not all(
        isinstance(usage.get(k), int) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    ):
        raise CheckFailed(
            "usage missing or incomplete",
            [
                Evidence(
                    expected="usage {prompt_tokens, completion_tokens, total_tokens} as integers",
                    seen=repr(usage),
                    where="usage",
                    request=ex.request_summary(),
                )
            ],
        )
    return usage


def body_head(ex: Exchange, limit: int = 300) -> str:
    """The first `limit` bytes of the body, as evidence."""
    return ex.raw[:limit].decode("utf-8", "replace")


def status_failure(ctx: Context, ex: Exchange, message: str, expected: str, limit: int = 300) -> CheckFailed:
    """A wrong HTTP status, with the head of the body that came with it."""
    return ctx.fail(message, expected=expected, seen=f"HTTP {ex.status}", offending=body_head(ex, limit), exchange=ex)


def judge_error_envelope(ctx: Context, ex: Exchange, message: str) -> None:
    """An error answer's body must be OpenAI's error envelope."""
    issues = ctx.envelope_issues(ex)
    if issues:
        raise ctx.field_issues(message, issues, ex, body_head(ex))


def field_failure(
    ctx: Context, ex: Exchange, where: str, message: str, expected: str, seen: str, *, offending: Any = None
) -> CheckFailed:
    """A failure found at `where` in the answer of `ex`: the evidence of most checks."""
    return ctx.fail(message, expected=expected, seen=seen, where=where, offending=offending, exchange=ex)


def chunk_failure(
    ctx: Context, ex: Exchange, chunk: Any, where: str, message: str, expected: str, seen: str
) -> CheckFailed:
    """A failure found in one stream chunk: the chunk itself is the offending evidence."""
    return ctx.fail(message, expected=expected, seen=seen, where=where, offending=chunk, exchange=ex)


def judge_same(ctx: Context, ex: Exchange, message: str, want: Any, got: Any, where: str) -> None:
    """Two answers that must agree (a repeat, a stream and its non-stream twin)."""
    if got != want:
        raise field_failure(ctx, ex, where, message, repr(want)[:300], repr(got)[:300])


def judge_no_tool_calls(ctx: Context, ex: Exchange, body: dict[str, Any], message: str, limit: int = 300) -> None:
    calls = message_of(body).get("tool_calls")
    if calls:
        raise field_failure(ctx, ex, "choices[0].message.tool_calls", message, "no tool_calls", repr(calls)[:limit])


def usage_failure(
    ctx: Context,
    ex: Exchange,
    usage: dict[str, Any],
    field: str,
    message: str,
    expected: str,
    *,
    seen: str | None = None,
    show_usage: bool = False,
) -> CheckFailed:
    """A wrong usage count: the failure points at `usage.<field>` and shows the
    count (or `seen`); with `show_usage` the whole usage object is the offending value."""
    return ctx.fail(
        message,
        expected=expected,
        seen=str(usage.get(field)) if seen is None else seen,
        where=f"usage.{field}",
        offending=usage if show_usage else None,
        exchange=ex,
    )


def judge_cap(
    ctx: Context,
    ex: Exchange,
    body: dict[str, Any],
    message: str,
    tokens: int,
    expected: str,
    finishes: tuple[str, ...],
) -> None:
    """An answer a token cap must end: exactly `tokens` completion tokens and a
    finish_reason in `finishes`."""
    count = usage_of(body, ex)["completion_tokens"]
    finish = choice_of(body).get("finish_reason")
    if count != tokens or finish not in finishes:
        seen = f"{count} tokens, finish_reason {finish!r}"
        raise field_failure(ctx, ex, "usage.completion_tokens", message, expected, seen)


def required_setting(ctx: Context, name: str, why: str) -> Any:
    """The target setting `name` a check cannot run without: a skip naming its
    command-line flag and `why` when it is not given."""
    value = getattr(ctx.target, name)
    if not value:
        raise ctx.skip(f"needs --{name.replace('_', '-')} ({why})")
    return value


def judge_total(ctx: Context, ex: Exchange, usage: dict[str, int]) -> None:
    """total_tokens is prompt_tokens + completion_tokens."""
    total = usage["prompt_tokens"] + usage["completion_tokens"]
    if usage["total_tokens"] != total:
        raise usage_failure(ctx, ex, usage, "total_tokens", "total is not the sum", f"{total}", show_usage=True)


@dataclass(frozen=True, slots=True)
class JsonShape:
    """What a JSON text must be: `expected` in words, `fits` as a test, and
    `misfit`, the failure of a text that parses but does not fit."""

    expected: str
    fits: Callable[[Any], bool]
    misfit: str


def judge_json_text(
    ctx: Context,
    ex: Exchange,
    text: Any,
    where: str,
    unparsed: str,
    shape: JsonShape,
    unparsed_evidence: tuple[str, str] | None = None,
) -> Any:
    """`text` (a message's content, a tool call's arguments) must parse as JSON
    of `shape`: the failure is `unparsed` when it does not parse (with
    `unparsed_evidence` as its expected and seen, if given), `shape.misfit` when
    it does not fit. Returns the parsed value."""
    try:
        parsed = json.loads(text or "")
    except ValueError:
        want, seen = unparsed_evidence or (shape.expected, repr(text)[:300])
        raise field_failure(ctx, ex, where, unparsed, want, seen) from None
    if not shape.fits(parsed):
        raise field_failure(ctx, ex, where, shape.misfit, shape.expected, repr(text)[:300])
    return parsed


def sdk_stream_failure(ctx: Context, exc: Exception, valid: str = "valid chunks") -> CheckFailed:
    """The official client's stream helper failed: it rejected a chunk (`valid`
    says what it wanted), or it broke on what it was sent."""
    if isinstance(exc, openai.APIResponseValidationError):
        return ctx.fail("the official client rejects a chunk", expected=valid, seen=str(exc)[:500])
    return ctx.fail(
        "the official client's stream helper broke",
        expected="a clean stream",
        seen=f"{type(exc).__name__}: {exc}"[:500],
    )


def usage_chunks(chunks: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    return [(n, c) for n, c in enumerate(chunks) if c.get("usage") is not None]


async def sdk_final_completion(ctx: Context, request: dict[str, Any]) -> Any:
    """Stream `request` through the official client's `chat.completions.stream()`
    helper and return `get_final_completion()`.

    The helper refuses to *parse* a completion that ended by length (it raises
    LengthFinishReasonError carrying the accumulated completion); a random model
    nearly always ends by length, and accumulation, which is what is judged
    here, has already happened, so the carried completion is used."""
    try:
        async with ctx.sdk.chat.completions.stream(**request) as stream:
            return await stream.get_final_completion()
    except openai.LengthFinishReasonError as exc:
        return exc.completion
