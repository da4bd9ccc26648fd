"""docs/openai-checklist.md item 50: bad requests get 4xx with OpenAI's error envelope, never 5xx."""

from __future__ import annotations

from conformance.check import CheckList
from conformance.checks.common import body_head, judge_error_envelope
from conformance.context import Context
from conformance.http import Exchange
from conformance.result import CheckFailed, Evidence

CHECKS = CheckList("errors")


@CHECKS.must("errors.malformed_json", "a body that is not JSON is refused with 400, not 5xx")
async def malformed_json(ctx: Context) -> None:
    ex = await ctx.http.post("/chat/completions", None, raw_body=b'{"model": "x", "messages": [')
    ctx.memo["errors.malformed"] = ex
    ctx.expect_client_error(ex, (400,), "malformed JSON")


@CHECKS.must("errors.non_object_body", "a JSON body that is not an object is refused with 400/422, not 5xx")
async def non_object(ctx: Context) -> None:
    ex = await ctx.http.post("/chat/completions", None, raw_body=b"[1, 2, 3]")
    ctx.expect_client_error(ex, (400, 422), "a JSON array body")


@CHECKS.must("errors.missing_messages", "a chat request without messages is refused with 400/422")
async def missing_messages(ctx: Context) -> None:
    ex = await ctx.http.post("/chat/completions", {"model": ctx.target.model})
    ctx.expect_client_error(ex, (400, 422), "no messages")


@CHECKS.should("errors.empty_messages", "an empty messages array is refused with 400/422")
async def empty_messages(ctx: Context) -> None:
    ex = await ctx.chat(messages=[])
    ctx.expect_client_error(ex, (400, 422), "messages: []")


@CHECKS.must("errors.wrong_types", "fields of the wrong type (messages as a string) are refused with 400/422")
async def wrong_types(ctx: Context) -> None:
    ex = await ctx.chat(messages="hello")
    ctx.expect_client_error(ex, (400, 422), "messages as a string")


@CHECKS.must(
    "errors.envelope", 'error bodies are {"error": {message: str, type: str, param: str|null, code: str|null}} as JSON'
)
async def envelope(ctx: Context) -> None:
    samples: list[tuple[str, Exchange]] = [
        (
            "malformed JSON",
            ctx.memo.get("errors.malformed")
            or await ctx.http.post("/chat/completions", None, raw_body=b'{"model": "x", "messages": ['),
        ),
        ("unknown model", await ctx.chat(model="conformance-no-such-model")),
        ("temperature out of range", await ctx.chat(temperature=5)),
    ]
    evidence = []
    for what, ex in samples:
        if ex.status < 400:
            continue  # other checks judge whether it should have been refused
        for issue in ctx.envelope_issues(ex):
            evidence.append(
                Evidence(
                    expected=issue.expected,
                    seen=issue.seen,
                    where=f"{what}: {issue.path}",
                    offending=body_head(ex, 400),
                    request=ex.request_summary(),
                )
            )
    if not any(ex.status >= 400 for _, ex in samples):
        raise ctx.skip("none of the bad requests was refused, so no error body to judge")
    if evidence:
        raise CheckFailed(f"{len(evidence)} error-envelope deviation(s)", evidence)


@CHECKS.should("errors.not_found_route", "an unknown route is 404 with the error envelope")
async def unknown_route(ctx: Context) -> None:
    ex = await ctx.http.get("/conformance/no-such-route")
    if ex.status != 404:
        raise ctx.fail("unknown route", expected="HTTP 404", seen=f"HTTP {ex.status}", exchange=ex)
    judge_error_envelope(ctx, ex, "404 body is not the error envelope")
