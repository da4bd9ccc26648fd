"""An aiohttp application served inside the test's own event loop, for a test that
needs a small HTTP peer it scripts itself (a JWKS endpoint, a stub upstream)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    """`app` on a free loopback port for the block; yields its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
