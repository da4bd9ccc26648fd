"""A real gateway served by uvicorn on this test's event loop, on a free loopback
port: the whole HTTP path, with the Gateway object (its metrics, its tracing) in
reach of the test."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import uvicorn

from gateway.app import Gateway, HotPath, create_app
from gateway.config.schema import parse_config
from gateway.observe.tracing import Tracing
from policies.rollout_records import RolloutSink
from processes import free_port
from tests.procs import sample_value


@dataclass
class Served:
    url: str
    gateway: Gateway

    def metric(self, name: str, **labels: str) -> float:
        return sample_value(self.gateway.metrics.registry, name, labels)


@contextlib.asynccontextmanager
async def serving(
    config: dict, tracing: Tracing | None = None, rollouts: RolloutSink | None = None
) -> AsyncIterator[Served]:
    """`rollouts`: the rollout sink the gateway reads its shares from (None: the config's steps)."""
    port = free_port()
    listening = parse_config({**config, "listen": {"host": "127.0.0.1", "port": port}})
    app = create_app(Gateway(listening, tracing=tracing, rollouts=rollouts))
    hot = HotPath(app)
    # The app handed over as a factory and declared ASGI 3: uvicorn then neither calls it with no
    # arguments to guess whether it is a factory nor inspects __call__ to guess its interface.
    # Both guesses go wrong when __call__ is wrapped (mutmut's trampoline takes any arguments).
    server = uvicorn.Server(
        uvicorn.Config(
            lambda: hot,
            factory=True,
            interface="asgi3",
            host="127.0.0.1",
            port=port,
            log_level="warning",
            access_log=False,
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("the gateway stopped before it started")
                await asyncio.sleep(0.01)
        yield Served(f"http://127.0.0.1:{port}", app.state.gateway)
    finally:
        server.should_exit = True
        await task
