"""docs/openai-checklist.md item 52: a client that goes away mid-stream must not cost the server."""

from __future__ import annotations

import asyncio
import re
import time

import httpx

from conformance.check import CheckList
from conformance.checks.common import required_setting, status_failure
from conformance.context import Context
from conformance.http import encode_json

CHECKS = CheckList("cancellation")

DROPPED_STREAMS = 3
LONG_ANSWER_TOKENS = 512
SETTLE_S = 10.0
# Gauges of in-flight work across runtimes and our gateway; summed when several match.
RUNNING_METRIC = re.compile(
    r"^(vllm:num_requests_running|sglang:num_running_reqs|switchyard_inflight_requests)"
    r"(\{[^}]*\})?\s+([0-9.eE+-]+)$"
)


async def _drop_streams(ctx: Context) -> None:
    # ignore_eos keeps the answer running long enough to be cut; a server that
    # refuses the extension is asked without it.
    body = ctx.chat_body(max_tokens=LONG_ANSWER_TOKENS, stream=True, ignore_eos=True)
    for _ in range(DROPPED_STREAMS):
        ex = await ctx.http.stream_then_drop("/chat/completions", body, read_chunks=1)
        if ex.status == 400 and "ignore_eos" in body:
            body.pop("ignore_eos")
            ex = await ctx.http.stream_then_drop("/chat/completions", body, read_chunks=1)
        if ex.status != 200:
            raise status_failure(ctx, ex, "could not start a stream to cancel", "HTTP 200", limit=400)


async def _running(metrics_url: str) -> float | None:
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(metrics_url)).text
    values = [float(m.group(3)) for line in text.splitlines() if (m := RUNNING_METRIC.match(line))]
    return sum(values) if values else None


@CHECKS.must("cancel.server_survives", "after clients drop streams mid-answer, the server answers the next request")
async def survives(ctx: Context) -> None:
    await _drop_streams(ctx)
    ex = await ctx.chat(max_tokens=4)
    ctx.ok_json(ex, "the request after three dropped streams")


@CHECKS.should("cancel.frees_running", "a dropped stream stops counting as running within 10 s (needs --metrics-url)")
async def frees_running(ctx: Context) -> None:
    url = required_setting(ctx, "metrics_url", "a Prometheus endpoint with a running-requests gauge")
    if await _running(url) is None:
        raise ctx.skip(f"no running-requests gauge found at {url}")
    # Earlier checks may have left aborted work winding down: start from a settled gauge.
    baseline = await _settled(url)
    body = ctx.chat_body(max_tokens=LONG_ANSWER_TOKENS, stream=True, ignore_eos=True)
    async with ctx.http.client.stream(
        "POST", "/chat/completions", content=encode_json(body), headers=ctx.http.headers()
    ) as resp:
        if resp.status_code != 200:
            raise ctx.skip(f"could not start a long stream (HTTP {resp.status_code})")
        async for _ in resp.aiter_raw():
            break
        during = await _running(url)
    if during is None or during <= baseline:
        raise ctx.skip(
            f"the gauge did not count the open stream ({baseline} before, {during} during), "
            "so its release cannot be judged"
        )
    deadline = time.monotonic() + SETTLE_S
    now = await _running(url)
    while now is not None and now > baseline and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        now = await _running(url)
    if now is None or now > baseline:
        raise ctx.fail(
            "the dropped stream is still running",
            expected=f"running gauge back to {baseline} within {SETTLE_S:.0f} s",
            seen=f"{now} (it was {during} while the stream was open)",
            where=url,
        )


async def _settled(url: str) -> float:
    """The gauge once it stops falling (or after SETTLE_S)."""
    deadline = time.monotonic() + SETTLE_S
    value = await _running(url) or 0.0
    while value > 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        nxt = await _running(url) or 0.0
        if nxt >= value:
            break
        value = nxt
    return value
