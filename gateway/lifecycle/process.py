"""The process's life once it serves: config reloads (SIGHUP, `POST /admin/reload`, the
file watcher), backends a reload took out closed once no request of an older config
version is left (`InFlight.oldest_version`), and the drain: `/readyz` 503, new requests
refused after `drain.accept_grace_s`, those under way cut after `drain.timeout_s`
(gateway/lifecycle/inflight.py), exit 0. docs/architecture.md, "Lifecycle".
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Protocol

from adapters.errors import GatewayError
from gateway.backends.backend import Backend
from gateway.backends.backend_set import Retired
from gateway.config.schema import GatewayConfig
from gateway.lifecycle.inflight import InFlight
from gateway.lifecycle.reload import ConfigReloader

log = logging.getLogger("switchyard.lifecycle")

TICK_S = 0.25  # how often retired backends and the parent process are looked at


class Served(Protocol):
    """What the lifecycle reads and sets on the gateway (gateway/app.py)."""

    config: GatewayConfig
    draining: bool  # /readyz answers 503
    refusing: bool  # new API requests are answered 503


def shutting_down(retry_after_s: float) -> GatewayError:
    return GatewayError(
        503,
        "This gateway process is shutting down; retry the request.",
        code="gateway_shutting_down",
        retry_after=retry_after_s,
    )


class Lifecycle:
    def __init__(
        self, served: Served, inflight: InFlight, reloader: ConfigReloader, supervisor_pid: int | None = None
    ) -> None:
        self.served = served
        self.inflight = inflight
        self.reloader = reloader
        # In a worker (serve --workers): the parent; its exit drains this worker.
        self.supervisor_pid = supervisor_pid
        self.retired: list[tuple[int, Retired]] = []  # (the last version that used it, what it is)
        self.on_drained: Callable[[], None] = lambda: None  # the server stops (gateway/http/server.py)
        self.drained = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._ticker: asyncio.Task | None = None
        self._drain: asyncio.Task | None = None

    def start(self) -> None:
        self._ticker = asyncio.create_task(self._tick(), name="lifecycle")

    async def aclose(self) -> None:
        """At shutdown: stop looking, and close what reloads retired (no request is left)."""
        for task in [self._ticker, *self._tasks]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*[t for t in [self._ticker, *self._tasks] if t is not None], return_exceptions=True)
        for _, retired in self.retired:
            await retired.aclose()
        self.retired.clear()

    # ---- reloads ---------------------------------------------------------------------

    def reload_soon(self, trigger: str) -> None:
        """A reload from a signal handler (it cannot await)."""
        self._spawn(self.reloader.reload(trigger))

    def retired_backends(self) -> list[Backend]:
        """The backends reloads took out that are still open (requests hold them)."""
        return [b for _, retired in self.retired for b in retired.backends]

    def retire(self, version: int, retired: Retired) -> None:
        """`retired` was last in force in `version`; closed once no request of that version or older is left."""
        if retired.backends or retired.adapters or retired.feeds:
            self.retired.append((version, retired))

    async def close_unused(self) -> None:
        oldest = self.inflight.oldest_version()
        still = []
        for version, retired in self.retired:
            if oldest is None or oldest > version:
                log.info("closing backends no longer in use: %s", ", ".join(b.name for b in retired.backends))
                await retired.aclose()
            else:
                still.append((version, retired))
        self.retired = still

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        next_look = loop.time()
        while True:
            await asyncio.sleep(TICK_S)
            try:
                if self.retired:
                    await self.close_unused()
                watch = self.served.config.reload
                if watch.watch and loop.time() >= next_look:
                    next_look = loop.time() + watch.poll_interval_s
                    if self.reloader.file_changed():
                        await self.reloader.reload("file changed")
                if self.supervisor_pid is not None and os.getppid() != self.supervisor_pid:
                    log.error("the supervisor process is gone; draining")
                    self.stop(grace=False)
            except Exception:  # the loop outlives any one failure
                log.exception("lifecycle tick failed")

    # ---- the drain -------------------------------------------------------------------

    def stop(self, grace: bool = True) -> None:
        """Begin the drain (from a signal handler); once begun, it goes its way."""
        if self._drain is not None:
            return
        self.served.draining = True
        self._drain = self._spawn(self._drained(grace))

    async def _drained(self, grace: bool) -> None:
        cfg = self.served.config.drain
        accept_s = cfg.accept_grace_s if grace else 0.0
        log.warning(
            "draining: /readyz answers 503; new requests are served for %g s more, then refused; "
            "the %d under way get %g s to finish",
            accept_s,
            len(self.inflight),
            cfg.timeout_s,
        )
        await asyncio.sleep(accept_s)
        self.served.refusing = True
        if not await self.inflight.wait_empty(cfg.timeout_s):
            cut = await self.inflight.cut()
            log.warning("drain time is up: %d request(s) ended with an error", cut)
        log.info("drained; stopping")
        self.drained.set()
        self.on_drained()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
