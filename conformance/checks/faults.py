"""docs/openai-checklist.md items 50-51 under failure: what reaches the client when the runtime
fails mid-stream, cuts the connection, omits [DONE], ends with an engine-only
finish reason, or answers an error or overload status.

Failures cannot be provoked on a healthy runtime from outside, so these checks
need a server that understands the simulators' prompt markers (`[[sim:...]]`,
simulators/faults.py), directly or through the gateway: declared with
`--sim-faults` (run) or `simulator: true` (a matrix targets file). On any other
target they are not applicable (`na`) and send nothing.
Against a simulator directly they show the runtime's own behaviour; through
the gateway, what the gateway makes of it.
"""

from __future__ import annotations

from typing import Any

import openai

from conformance.capabilities import SIM_FAULTS
from conformance.check import CheckList
from conformance.checks.common import body_head, choice_of, field_failure, judge_error_envelope, status_failure
from conformance.context import DEFAULT_PROMPT, Context
from conformance.http import Exchange
from conformance.result import CheckFailed, Evidence
from conformance.schema import chat_chunk_issues, chat_completion_issues, error_envelope_issues

CHECKS = CheckList("faults", profile="gateway", needs=(SIM_FAULTS,))


def _fault_body(ctx: Context, marker: str, **overrides: Any) -> dict[str, Any]:
    return ctx.chat_body(messages=[{"role": "user", "content": f"{DEFAULT_PROMPT} [[sim:{marker}]]"}], **overrides)


def _stream_error_event(ctx: Context, ex: Exchange) -> dict[str, Any]:
    """A failed stream must end `data: {"error": {...}}` then `data: [DONE]`,
    with the error in OpenAI's envelope; returns the error event."""
    if ex.sse is None:
        raise ctx.fail(
            "not an event stream", expected="text/event-stream", seen=ex.content_type or "<none>", exchange=ex
        )
    if not ex.sse.done_seen:
        seen = "; ".join(str(v) for v in ex.sse.violations)[:300] or "no [DONE]"
        if ex.transport_error:
            seen = f"connection closed mid-stream ({ex.transport_error}); {seen}"
        raise ctx.fail(
            "the failed stream does not end with [DONE] (clients hang or cannot tell it ended)",
            expected='data: {"error": ...} then data: [DONE]',
            seen=seen,
            exchange=ex,
        )
    events = [e for e in ex.sse.events if not e.is_done]
    errors = [e.payload for e in events if isinstance(e.payload, dict) and e.payload.get("error")]
    if not errors:
        last = events[-1].payload if events else None
        raise ctx.fail(
            "the failure is not reported in the stream (it looks like a normal answer)",
            expected='a data: {"error": {...}} event before [DONE]',
            seen=repr(last)[:300],
            exchange=ex,
        )
    if events[-1].payload is not errors[-1]:
        raise ctx.fail(
            "events after the error event",
            expected="the error event last, then [DONE]",
            seen=repr(events[-1].payload)[:300],
            exchange=ex,
        )
    issues = error_envelope_issues(errors[-1])
    if issues:
        raise ctx.field_issues("the in-stream error is not OpenAI's error envelope", issues, ex, errors[-1])
    return errors[-1]


@CHECKS.must(
    "faults.midstream_error", "a runtime failure mid-stream ends with an error event in the envelope, then [DONE]"
)
async def midstream_error(ctx: Context) -> None:
    ex = await ctx.http.post("/chat/completions", _fault_body(ctx, "error_after=3", stream=True))
    if ex.status != 200:
        raise status_failure(ctx, ex, "the stream did not start", "HTTP 200 then an in-stream error")
    _stream_error_event(ctx, ex)


@CHECKS.must(
    "faults.midstream_error_sdk", "the official client raises APIError with the message on a mid-stream failure"
)
async def midstream_error_sdk(ctx: Context) -> None:
    body = _fault_body(ctx, "error_after=3", stream=True)
    body.pop("stream")
    try:
        stream = await ctx.sdk.chat.completions.create(**body, stream=True)
        async for _ in stream:
            pass
    except openai.APIResponseValidationError as exc:
        raise ctx.fail(
            "a chunk fails strict validation before the error",
            expected="valid chunks, then an error event",
            seen=str(exc)[:400],
        ) from None
    except openai.APIError as exc:
        if not exc.message or exc.message == "An error occurred during streaming":
            raise ctx.fail(
                "the error carries no message", expected="error.message from the server", seen=repr(exc.message)
            ) from None
        return
    raise ctx.fail(
        "the client saw a normal end of stream",
        expected="APIError raised by the official client",
        seen="no exception: the failure is invisible to the client",
    )


@CHECKS.must(
    "faults.connection_cut",
    "a runtime that drops the connection mid-stream still gives the client an error event and [DONE]",
)
async def connection_cut(ctx: Context) -> None:
    ex = await ctx.http.post("/chat/completions", _fault_body(ctx, "cut_after=2", stream=True))
    if ex.status != 200:
        raise ctx.fail(
            "the stream did not start",
            expected="HTTP 200 then an in-stream error",
            seen=f"HTTP {ex.status}",
            exchange=ex,
        )
    _stream_error_event(ctx, ex)


@CHECKS.must("faults.missing_done", "a runtime stream without [DONE] still reaches the client with data: [DONE]")
async def missing_done(ctx: Context) -> None:
    ex = await ctx.http.post("/chat/completions", _fault_body(ctx, "no_done", stream=True))
    ctx.ok_stream(ex)
    assert ex.sse is not None
    if not ex.sse.done_seen:
        raise ctx.fail(
            "no [DONE]", expected="data: [DONE] last", seen="; ".join(map(str, ex.sse.violations))[:300], exchange=ex
        )


@CHECKS.must(
    "faults.engine_finish_reason", "an engine-only finish reason (abort) never reaches the client outside the enum"
)
async def engine_finish_reason(ctx: Context) -> None:
    evidence: list[Evidence] = []
    ex = await ctx.http.post("/chat/completions", _fault_body(ctx, "finish=abort"))
    if ex.status == 200:
        body = ctx.ok_json(ex)
        for issue in chat_completion_issues(body):
            evidence.append(Evidence(issue.expected, issue.seen, issue.path, choice_of(body), ex.request_summary()))
    elif error_envelope_issues(ex.json()):
        evidence.append(
            Evidence(
                "HTTP 200 with an enum finish_reason, or an error envelope",
                f"HTTP {ex.status}",
                "",
                body_head(ex),
                ex.request_summary(),
            )
        )
    ex = await ctx.http.post("/chat/completions", _fault_body(ctx, "finish=abort", stream=True))
    for n, chunk in enumerate(ex.sse.chunks if ex.sse else []):
        for issue in chat_chunk_issues(chunk) if not chunk.get("error") else []:
            evidence.append(
                Evidence(issue.expected, issue.seen, f"chunk {n} {issue.path}", chunk, ex.request_summary())
            )
    if evidence:
        raise CheckFailed("an engine-internal finish reason leaked", evidence)


@CHECKS.must(
    "faults.upstream_error_status", "a runtime answering 503 becomes an OpenAI error envelope with a 5xx status"
)
async def upstream_error_status(ctx: Context) -> None:
    ex = await ctx.http.post("/chat/completions", _fault_body(ctx, "status=503"))
    if ex.status < 500:
        raise status_failure(ctx, ex, "a runtime failure hidden or misreported", "HTTP 5xx")
    judge_error_envelope(ctx, ex, "the error is not OpenAI's envelope")


@CHECKS.should(
    "faults.upstream_overload", "a runtime's own overload answer becomes 429/503 with Retry-After and the envelope"
)
async def upstream_overload(ctx: Context) -> None:
    ex = await ctx.http.post("/chat/completions", _fault_body(ctx, "overloaded"))
    if ex.status not in (429, 503):
        raise status_failure(ctx, ex, "overload status", "HTTP 429 or 503")
    judge_error_envelope(ctx, ex, "the overload error is not OpenAI's envelope")
    if not (ex.headers.get("retry-after") or "").strip():
        raise field_failure(ctx, ex, "header retry-after", "no Retry-After", "a Retry-After header", "<absent>")
