"""The progress bar draws while a run goes and leaves a final line."""

from __future__ import annotations

import asyncio
import io

from bench.progress import Progress


async def test_progress_draws_and_finishes() -> None:
    out = io.StringIO()
    p = Progress(4, label="run ", stream=out)
    p.start()
    p.sent, p.done, p.failed = 3, 2, 1
    await asyncio.sleep(0.05)
    assert "\r" in out.getvalue() and "2/4" in out.getvalue()
    p.sent = p.done = 4
    await p.stop()
    last = out.getvalue().rstrip("\n").split("\r")[-1]
    assert last.startswith("run [" + "#" * 30 + "] 4/4") and "failed 1" in last


async def test_disabled_progress_writes_nothing() -> None:
    out = io.StringIO()
    p = Progress(2, stream=out, enabled=False)
    p.start()
    await p.stop()
    assert out.getvalue() == ""
