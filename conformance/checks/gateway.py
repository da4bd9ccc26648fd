"""Gateway behaviour a runtime alone does not have: authentication (401),
authorization (a model the key may not use looks missing: 404), rate limits (429 with Retry-After and x-ratelimit-*) and
overload (503). Each needs knowledge of the gateway's config, given as CLI
options; without it the check is skipped, with the option it needs named."""

from __future__ import annotations

import asyncio
import secrets
from email.utils import parsedate_to_datetime

import httpx
import orjson

from conformance.check import CheckList
from conformance.checks.common import (
    body_head,
    field_failure,
    judge_error_envelope,
    required_setting,
)
from conformance.context import Context
from conformance.http import Exchange
from conformance.result import CheckFailed, Evidence

CHECKS = CheckList("gateway", profile="gateway")

RATE_LIMIT_ATTEMPTS = 40
OVERLOAD_CONCURRENCY = 24
RATELIMIT_HEADERS = ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests")


def _retry_after_ok(value: str | None) -> bool:
    if value is None:
        return False
    if value.strip().isdigit():
        return True
    try:
        parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return False
    return True


def _judge_envelope(ctx: Context, ex: Exchange, what: str) -> None:
    judge_error_envelope(ctx, ex, f"{what}: the body is not the error envelope")


@CHECKS.must("gateway.auth_missing_401", "a request without credentials is 401 with the error envelope")
async def auth_missing(ctx: Context) -> None:
    required_setting(ctx, "api_key", "a gateway with authentication on")
    ex = await ctx.http.post("/chat/completions", ctx.chat_body(), api_key=None)
    ctx.expect_client_error(ex, (401,), "no Authorization header")
    _judge_envelope(ctx, ex, "401")


@CHECKS.must("gateway.auth_bad_401", "a request with a wrong key is 401 with the error envelope")
async def auth_bad(ctx: Context) -> None:
    required_setting(ctx, "api_key", "a gateway with authentication on")
    bad = ctx.target.bad_api_key or f"sk-conformance-invalid-{secrets.token_hex(8)}"
    ex = await ctx.http.post("/chat/completions", ctx.chat_body(), api_key=bad)
    ctx.expect_client_error(ex, (401,), "a wrong API key")
    _judge_envelope(ctx, ex, "401")


@CHECKS.must(
    "gateway.forbidden_model_hidden",
    "a key asking for a model it may not use gets the same 404 as for a model that does not exist",
)
async def forbidden(ctx: Context) -> None:
    required_setting(ctx, "forbidden_model", "a configured model the --api-key may not use")
    forbidden_model = ctx.target.forbidden_model
    ex = await ctx.chat(model=forbidden_model)
    ctx.expect_client_error(ex, (404,), f"model {forbidden_model!r} for this key")
    _judge_envelope(ctx, ex, "404")
    missing_model = f"conformance-no-such-model-{secrets.token_hex(4)}"
    missing = await ctx.chat(model=missing_model)
    ctx.expect_client_error(missing, (404,), f"model {missing_model!r}")
    seen, expected = ex.json()["error"], missing.json()["error"]
    if (seen["code"], seen["type"], seen["message"].replace(forbidden_model, "M")) != (
        expected["code"],
        expected["type"],
        expected["message"].replace(missing_model, "M"),
    ):
        raise ctx.fail(
            "a forbidden model is told apart from a missing one (a tenant could enumerate models)",
            expected=f"the error of a missing model: {expected}",
            seen=str(seen),
            exchange=ex,
        )


@CHECKS.must(
    "gateway.rate_limit_429", "past its request limit a key gets 429 with Retry-After and x-ratelimit-* headers"
)
async def rate_limit(ctx: Context) -> None:
    key = required_setting(ctx, "rate_limited_key", "a key whose tenant allows a few requests per minute")
    body = ctx.chat_body(max_tokens=1)
    limited = None
    for _ in range(RATE_LIMIT_ATTEMPTS):
        ex = await ctx.http.post("/chat/completions", body, api_key=key)
        if ex.status == 429:
            limited = ex
            break
        if ex.status != 200:
            raise ctx.fail(
                "unexpected status before the limit", expected="200 then 429", seen=f"HTTP {ex.status}", exchange=ex
            )
    if limited is None:
        raise ctx.fail("no 429", expected=f"HTTP 429 within {RATE_LIMIT_ATTEMPTS} requests", seen="only 200s")
    _judge_envelope(ctx, limited, "429")
    evidence = []
    if not _retry_after_ok(limited.headers.get("retry-after")):
        evidence.append(
            Evidence(
                expected="Retry-After: <seconds> or an HTTP date",
                seen=repr(limited.headers.get("retry-after")),
                where="header retry-after",
                request=limited.request_summary(),
            )
        )
    for name in RATELIMIT_HEADERS:
        if name not in limited.headers:
            evidence.append(
                Evidence(
                    expected=f"header {name}",
                    seen="<absent>",
                    where=f"header {name}",
                    offending=dict(limited.headers),
                    request=limited.request_summary(),
                )
            )
    if evidence:
        raise CheckFailed("429 without the headers a client backs off by", evidence)


@CHECKS.must(
    "gateway.overload_503", "when a model's queue is full the gateway sheds load with 503 (or 429) and Retry-After"
)
async def overload(ctx: Context) -> None:
    model = required_setting(ctx, "overload_model", "a model whose queue overflows under a burst")
    body = ctx.chat_body(model=model, max_tokens=256, ignore_eos=True)
    headers = ctx.http.headers()

    async def one(client: httpx.AsyncClient) -> Exchange:
        ex = Exchange("POST", "/chat/completions", body)
        resp = await client.post("/chat/completions", content=orjson.dumps(body), headers=headers)
        ex.status, ex.headers, ex.raw = resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, resp.content
        return ex

    async with httpx.AsyncClient(
        base_url=ctx.target.base_url,
        timeout=ctx.target.timeout_s,
        limits=httpx.Limits(max_connections=OVERLOAD_CONCURRENCY),
    ) as client:
        results = await asyncio.gather(*(one(client) for _ in range(OVERLOAD_CONCURRENCY)))
    shed = [ex for ex in results if ex.status in (503, 429)]
    others = sorted({ex.status for ex in results if ex.status not in (200, 503, 429)})
    if others:
        bad = next(ex for ex in results if ex.status in others)
        raise ctx.fail(
            "a burst produced other failures",
            expected="200, or 503/429 when shedding",
            seen=f"statuses {others}",
            offending=body_head(bad),
            exchange=bad,
        )
    if not shed:
        raise ctx.fail(
            "no load was shed",
            expected=f"some 503 among {OVERLOAD_CONCURRENCY} concurrent requests",
            seen="all 200 (is the model's queue small enough?)",
        )
    ex = shed[0]
    _judge_envelope(ctx, ex, str(ex.status))
    if not _retry_after_ok(ex.headers.get("retry-after")):
        raise field_failure(
            ctx,
            ex,
            "header retry-after",
            "shed without Retry-After",
            "Retry-After: <seconds>",
            repr(ex.headers.get("retry-after")),
        )
