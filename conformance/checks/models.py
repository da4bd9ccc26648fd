"""docs/openai-checklist.md items 1-4: the models list."""

from __future__ import annotations

from conformance.check import CheckList
from conformance.checks.common import field_failure
from conformance.context import Context, body_excerpt
from conformance.schema import model_issues, model_list_issues

CHECKS = CheckList("models")


@CHECKS.must("models.list", "GET /models is 200 JSON {object:'list', data:[…]} with well-formed models")
async def models_list(ctx: Context) -> None:
    ex = await ctx.http.get("/models")
    body = ctx.ok_json(ex, "GET /models")
    issues = model_list_issues(body)
    if issues:
        raise ctx.field_issues("the models list does not match the spec", issues, ex, body)


@CHECKS.must("models.lists_target", "the model under test is listed in GET /models")
async def models_lists_target(ctx: Context) -> None:
    ex = await ctx.http.get("/models")
    body = ctx.ok_json(ex, "GET /models")
    ids = [m.get("id") for m in body.get("data") or [] if isinstance(m, dict)]
    if ctx.target.model not in ids:
        raise field_failure(
            ctx,
            ex,
            "data[].id",
            "the model under test is not listed",
            f"an entry with id {ctx.target.model!r}",
            f"ids {ids}",
        )


@CHECKS.should("models.first_is_usable", "data[0].id (what benchmark clients pick by default) is accepted as a model")
async def first_is_usable(ctx: Context) -> None:
    listing = ctx.ok_json(await ctx.http.get("/models"), "GET /models")
    data = listing.get("data") or []
    first = data[0].get("id") if data and isinstance(data[0], dict) else None
    if not isinstance(first, str):
        raise ctx.fail("no first model", expected="data[0].id", seen=repr(data[:1])[:200])
    ex = await ctx.chat(model=first, max_tokens=1)
    ctx.ok_json(ex, f"a chat completion with model {first!r}")


@CHECKS.should("models.retrieve", "GET /models/{id} returns the same model object as the list")
async def models_retrieve(ctx: Context) -> None:
    listing = ctx.ok_json(await ctx.http.get("/models"), "GET /models")
    listed = next(
        (m for m in listing.get("data") or [] if isinstance(m, dict) and m.get("id") == ctx.target.model), None
    )
    ex = await ctx.http.get(f"/models/{ctx.target.model}")
    body = ctx.ok_json(ex, f"GET /models/{ctx.target.model}")
    issues = model_issues(body)
    if issues:
        raise ctx.field_issues("the model object does not match the spec", issues, ex, body)
    if listed is not None:
        for key in ("id", "object", "owned_by"):
            if body.get(key) != listed.get(key):
                raise field_failure(
                    ctx,
                    ex,
                    key,
                    "retrieve and list disagree",
                    f"{key}={listed.get(key)!r} as in the list",
                    f"{key}={body.get(key)!r}",
                    offending=body,
                )


@CHECKS.should("models.retrieve_unknown_404", "GET /models/{unknown} is 404 with an error body")
async def models_retrieve_unknown(ctx: Context) -> None:
    ex = await ctx.http.get("/models/conformance-no-such-model")
    ctx.expect_client_error(ex, (404,), "GET /models/conformance-no-such-model")


@CHECKS.must("models.unknown_model_404", "a chat completion naming an unknown model is 404 with an error body")
async def unknown_model(ctx: Context) -> None:
    ex = await ctx.chat(model="conformance-no-such-model")
    if ex.status == 200:
        raise ctx.fail(
            "an unknown model was served",
            expected="HTTP 404 (model not found)",
            seen="HTTP 200",
            offending=body_excerpt(ex, 300),
            exchange=ex,
        )
    ctx.expect_client_error(ex, (404,), "unknown model")
