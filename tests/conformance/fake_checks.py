"""Check functions with a known outcome, for the runner, verdict and report tests."""

from __future__ import annotations

import asyncio

from conformance.check import Check
from conformance.context import Context
from conformance.result import CheckFailed, Evidence, Level, Skipped


async def passes(ctx: Context) -> None:
    return None


async def fails(ctx: Context) -> None:
    raise CheckFailed(
        "role twice in <chunk 3>",  # markup in a message: the HTML report must escape it
        [
            Evidence(
                expected="role once",
                seen="role in chunk 3",
                where="chunk 3 choices[0].delta.role",
                offending={"delta": {"role": "assistant"}},
                request={"method": "POST", "path": "/chat/completions", "body": {"stream": True}},
            )
        ],
    )


async def skips(ctx: Context) -> None:
    raise Skipped(
        "needs --api-key",
        [Evidence(expected="an API key", seen="none given", request={"method": "POST", "path": "/x", "body": {}})],
    )


async def breaks(ctx: Context) -> None:
    raise KeyError("boom")


async def hangs(ctx: Context) -> None:
    await asyncio.sleep(30)


async def sends(ctx: Context) -> None:
    await ctx.http.get("/models")


def check(fn, level: Level = Level.MUST, needs: tuple[str, ...] = (), name: str = "") -> Check:
    return Check(f"t.{name or fn.__name__}", "test", level, "core", f"rule of {fn.__name__}", fn, needs)
