"""`/v1/embeddings`: the answer against OpenAI's published schema
(CreateEmbeddingResponse), batches in order, base64 encoding that decodes to the
float vector, the official client, and a 400 for an empty input. The target's
model is an embedding model."""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

from conformance.check import CheckList
from conformance.context import Context
from conformance.http import Exchange
from conformance.openapi import openapi_issues
from conformance.result import CheckFailed, Evidence

CHECKS = CheckList("embeddings", profile="embeddings", needs=("embeddings",))
TEXTS = ["The quick brown fox.", "A lazy dog sleeps."]


async def embed(ctx: Context, what: str, **body: Any) -> tuple[Exchange, dict[str, Any]]:
    ex = await ctx.http.post("/embeddings", {"model": ctx.target.model, **body})
    answer = ctx.ok_json(ex, what, capability="embeddings")
    judged = answer
    if body.get("encoding_format") == "base64":
        # The spec types `embedding` as numbers only; the base64 string is judged by its check.
        judged = {
            **answer,
            "data": [{**d, "embedding": [0.0]} if isinstance(d, dict) else d for d in answer.get("data") or []],
        }
    issues = openapi_issues(judged, "CreateEmbeddingResponse")
    if issues:
        raise ctx.field_issues(
            f"{what} does not validate against CreateEmbeddingResponse", issues, ex, str(answer)[:600]
        )
    return ex, answer


async def baseline(ctx: Context) -> dict[str, Any]:
    if "embeddings" not in ctx.memo:
        ctx.memo["embeddings"] = (await embed(ctx, "embeddings of two texts", input=TEXTS))[1]
    return ctx.memo["embeddings"]


@CHECKS.must("embeddings.schema", "an embeddings answer validates against OpenAI's schema, with its usage")
async def schema(ctx: Context) -> None:
    answer = await baseline(ctx)
    usage = answer.get("usage") or {}
    if usage.get("prompt_tokens", 0) <= 0 or usage.get("total_tokens") != usage.get("prompt_tokens"):
        raise CheckFailed("usage", [Evidence(expected="prompt_tokens > 0 == total_tokens", seen=repr(usage))])


@CHECKS.must("embeddings.batch", "a batch answers one finite, non-empty vector per input, in input order")
async def batch(ctx: Context) -> None:
    data = (await baseline(ctx))["data"]
    indices = [d.get("index") for d in data]
    vectors = [d.get("embedding") for d in data]
    dims = {len(v) for v in vectors if isinstance(v, list)}
    finite = all(isinstance(x, float | int) and math.isfinite(x) for v in vectors for x in v)
    if indices != [0, 1] or len(dims) != 1 or 0 in dims or not finite:
        raise ctx.fail(
            "the batch's vectors",
            expected="indices [0, 1], two finite vectors of one size",
            seen=f"indices {indices}, sizes {[len(v) for v in vectors]}, finite {finite}",
        )


@CHECKS.must("embeddings.base64", "encoding_format base64 decodes (little-endian float32) to the float vector")
async def as_base64(ctx: Context) -> None:
    floats = (await baseline(ctx))["data"][0]["embedding"]
    ex, answer = await embed(ctx, "base64 embeddings", input=TEXTS, encoding_format="base64")
    packed = answer["data"][0]["embedding"]
    try:
        raw = base64.b64decode(packed, validate=True)
        decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
    except Exception:
        raise ctx.fail("not base64 of float32", expected="base64", seen=repr(packed)[:200], exchange=ex) from None
    if len(decoded) != len(floats) or any(abs(a - b) > 1e-4 * max(1.0, abs(b)) for a, b in zip(decoded, floats)):
        raise ctx.fail(
            "the base64 vector differs from the float one",
            expected=f"{len(floats)} values as {floats[:3]}...",
            seen=f"{len(decoded)} values as {list(decoded[:3])}...",
            exchange=ex,
        )


@CHECKS.must("embeddings.sdk", "the official client's embeddings.create (strict validation) parses the answer")
async def sdk(ctx: Context) -> None:
    # encoding_format given: without it the client asks for base64 and decodes it after
    # validation, which its strict mode would refuse for any server.
    r = await ctx.sdk.embeddings.create(model=ctx.target.model, input=TEXTS[0], encoding_format="float")
    if len(r.data) != 1 or not r.data[0].embedding:
        raise ctx.fail("no vector", expected="one embedding", seen=repr(r)[:300])


@CHECKS.should("embeddings.empty_input", "an empty input is refused with a 400")
async def empty_input(ctx: Context) -> None:
    ex = await ctx.http.post("/embeddings", {"model": ctx.target.model, "input": ""})
    ctx.expect_client_error(ex, (400,), "empty input")
