"""docs/openai-checklist.md items 42-44: stop sequences, including one that spans a token boundary.

The model's text is gibberish, so stop strings are picked from its own greedy
answer: a two-character piece whose first occurrence is at a known place. The
stopped answer must then be exactly the text before that place.
"""

from __future__ import annotations

from collections.abc import Callable

from conformance.check import CheckList
from conformance.checks.common import by_choice, choice_of, field_failure, message_of, usage_of
from conformance.context import Context
from conformance.http import Exchange

CHECKS = CheckList("stop")

STOP_MAX_TOKENS = 32
NEVER = "\u2603\u2604never"  # cannot appear in a tiny byte-level model's ASCII-heavy output by chance in 32 tokens


def _printable(s: str) -> bool:
    """Plain ASCII without whitespace at either end (some runtimes strip it)."""
    return all(32 <= ord(ch) < 127 for ch in s) and s == s.strip()


async def _baseline(ctx: Context) -> tuple[Exchange, str, list[str], str | None]:
    """Greedy streamed answer: (exchange, full text, deltas, finish_reason)."""
    if "stop.baseline" not in ctx.memo:
        ex = await ctx.chat(max_tokens=STOP_MAX_TOKENS, stream=True)
        chunks = ctx.ok_stream(ex)
        deltas = []
        finish = None
        for chunk in chunks:
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    deltas.append(text)
                finish = choice.get("finish_reason") or finish
        ctx.memo["stop.baseline"] = (ex, "".join(deltas), deltas, finish)
    return ctx.memo["stop.baseline"]


def _within_token_stop(text: str) -> tuple[str, int] | None:
    for k in range(2, len(text) - 1):
        cand = text[k : k + 2]
        if _printable(cand) and text.find(cand) == k:
            return cand, k
    return None


def _cross_token_stop(deltas: list[str]) -> tuple[str, int] | None:
    """The last character of one delta plus the start of the next (2 or 3
    characters, so a space after the boundary can sit inside the sequence)."""
    text = "".join(deltas)
    pos = 0
    for i in range(len(deltas) - 1):
        pos += len(deltas[i])
        if i == 0:
            continue
        for end in (pos + 1, pos + 2):
            cand = text[pos - 1 : end]
            if len(cand) == end - pos + 1 and _printable(cand) and text.find(cand) == pos - 1:
                return cand, pos - 1
    return None


async def _judge_stopped(ctx: Context, stop: object, prefix: str) -> None:
    ex = await ctx.chat(max_tokens=STOP_MAX_TOKENS, stop=stop)
    body = ctx.ok_json(ex)
    content = message_of(body).get("content") or ""
    finish = choice_of(body).get("finish_reason")
    if content != prefix:
        raise field_failure(
            ctx,
            ex,
            "choices[0].message.content",
            "stopped text is not the text before the stop sequence",
            repr(prefix),
            repr(content),
        )
    if finish != "stop":
        raise field_failure(
            ctx, ex, "choices[0].finish_reason", "finish_reason after a stop sequence", "'stop'", repr(finish)
        )


async def _judge_within_token_stop(ctx: Context, as_request: Callable[[str], object]) -> None:
    """Stop on a sequence inside one token of the greedy answer, sent as `as_request(sequence)`."""
    _, text, _, _ = await _baseline(ctx)
    found = _within_token_stop(text)
    if not found:
        raise ctx.skip(f"the greedy answer {text!r} has no usable stop candidate")
    stop, k = found
    await _judge_stopped(ctx, as_request(stop), text[:k])


@CHECKS.must("stop.string", "stop as a string ends the answer before the sequence, finish_reason stop")
async def stop_string(ctx: Context) -> None:
    await _judge_within_token_stop(ctx, lambda stop: stop)


@CHECKS.must("stop.list", "stop as a list (≤4) ends the answer at the first sequence that matches")
async def stop_list(ctx: Context) -> None:
    await _judge_within_token_stop(ctx, lambda stop: [NEVER, stop, NEVER + "2"])


@CHECKS.must(
    "stop.across_tokens", "a stop sequence spanning two tokens is caught and no part of it leaks into the stream"
)
async def stop_across(ctx: Context) -> None:
    _, text, deltas, _ = await _baseline(ctx)
    found = _cross_token_stop(deltas)
    if not found:
        raise ctx.skip(f"no two-character stop candidate spans a delta boundary in {deltas!r}")
    stop, k = found
    await _judge_stopped(ctx, stop, text[:k])
    ex = await ctx.chat(max_tokens=STOP_MAX_TOKENS, stop=stop, stream=True)
    streams = by_choice(ctx.ok_stream(ex))
    got = streams[0].content if 0 in streams else ""
    if got != text[:k]:
        raise field_failure(
            ctx,
            ex,
            "delta.content (concatenated)",
            "the stream leaked part of the stop sequence (or lost text)",
            repr(text[:k]),
            repr(got),
            offending={"stop": stop},
        )
    finishes = [f for _, f in streams[0].finishes] if 0 in streams else []
    if finishes != ["stop"]:
        raise ctx.fail(
            "streamed finish_reason after a stop sequence", expected="['stop']", seen=str(finishes), exchange=ex
        )


@CHECKS.must(
    "stop.never_matches",
    "a stop sequence that never appears changes nothing: same text and finish_reason (length at max_tokens)",
)
async def stop_never(ctx: Context) -> None:
    # Judged against the greedy baseline, whichever way it ended: a model that
    # stops early on its own must stop at the same place with the unmatched stop.
    _, text, _, finish = await _baseline(ctx)
    ex = await ctx.chat(max_tokens=STOP_MAX_TOKENS, stop=[NEVER])
    body = ctx.ok_json(ex)
    usage = usage_of(body, ex)
    seen_finish = choice_of(body).get("finish_reason")
    if seen_finish != finish or (finish == "length" and usage["completion_tokens"] != STOP_MAX_TOKENS):
        raise ctx.fail(
            "an unmatched stop changed the answer",
            expected=f"finish {finish!r} as without the stop"
            + (f", after {STOP_MAX_TOKENS} tokens" if finish == "length" else ""),
            seen=f"finish {seen_finish!r} after {usage['completion_tokens']}",
            exchange=ex,
        )
    if (message_of(body).get("content") or "") != text:
        raise ctx.fail(
            "an unmatched stop changed the text",
            expected=repr(text)[:300],
            seen=repr(message_of(body).get("content"))[:300],
            exchange=ex,
        )


@CHECKS.should("stop.too_many_400", "more than 4 stop sequences are refused with 400")
async def stop_too_many(ctx: Context) -> None:
    ex = await ctx.chat(stop=[f"{NEVER}{i}" for i in range(5)])
    ctx.expect_client_error(ex, (400, 422), "5 stop sequences")
