"""The production Responses route in process: a real `Gateway` (API keys naming their
tenants: the key is the tenant's name) whose one model "m" is served by a scripted
adapter, behind its ASGI entry point (`HotPath`), reached over httpx2's ASGI transport.
What a test sees is what production runs: the front door, admission, dispatch under
the stream guard, the exchange runner and the Responses answer format."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai

from adapters.base import Event, GenerationRequest
from adapters.errors import GatewayError
from gateway.app import Gateway, HotPath, create_app
from gateway.config.schema import parse_config
from tests.gateway.scripted import ScriptedAdapter
from tests.procs import keys_auth_config

TENANTS = ("t", "alice", "bob", "other")


class ScriptedModel:
    """Model "m": the n-th generation plays `scripts[n]` (the last one again after
    that), each item an event or a GatewayError raised there; `hold`, when given, is
    awaited after each stream's first event."""

    def __init__(self, scripts: list[list[Event | GatewayError]], hold: asyncio.Event | None = None) -> None:
        self.scripts = scripts
        self.hold = hold
        self.adapter = ScriptedAdapter("b1", self._play)

    def _play(self, request: GenerationRequest) -> list[Any]:
        script = list(self.scripts[min(len(self.adapter.requests), len(self.scripts)) - 1])
        if self.hold is not None and script:
            script.insert(1, self.hold.wait)
        return script

    @property
    def requests(self) -> list[GenerationRequest]:
        return self.adapter.requests

    @property
    def ended(self) -> int:
        """Generations whose upstream stream was closed (read to its end or aborted)."""
        return self.adapter.ended


@contextlib.asynccontextmanager
async def responses_gateway(model: ScriptedModel, **config: Any) -> AsyncIterator[Gateway]:
    """A started gateway serving `model` as "m"; its response store as configured."""
    cfg = {
        "access_log": False,
        "auth": keys_auth_config({t: t for t in TENANTS}),
        "tenants": {t: {} for t in TENANTS},
        "models": {"m": {"backends": [{"name": "b1", "adapter": "openai", "url": "http://127.0.0.1:9/v1"}]}},
        **config,
    }
    gateway = Gateway(parse_config(cfg))
    gateway.backends.backends["b1"].adapter = model.adapter
    await gateway.startup()
    try:
        yield gateway
    finally:
        await gateway.shutdown()


def http_client(gateway: Gateway, tenant: str = "t") -> httpx2.AsyncClient:
    """A client of the gateway's ASGI entry point, with `tenant`'s key."""
    transport = httpx2.ASGITransport(app=HotPath(create_app(gateway)))
    return httpx2.AsyncClient(
        transport=transport, base_url="http://gateway.test", headers={"authorization": f"Bearer {tenant}"}
    )


def official(gateway: Gateway, tenant: str = "alice") -> openai.AsyncOpenAI:
    """The official async client, strict validation on, as `tenant`."""
    return openai.AsyncOpenAI(
        api_key=tenant,
        base_url="http://gateway.test/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.ASGITransport(app=HotPath(create_app(gateway)))),
        _strict_response_validation=True,
        max_retries=0,
    )
