"""/metrics when one port is served by several workers (`serve --workers N`).

The scraped worker asks its siblings for their exposition over a Unix socket each and
answers with every worker's series, labelled `worker="<index>"`; prometheus_client's
multiprocess mode cannot carry the gauges computed at scrape time. A sibling silent for
`SIBLING_TIMEOUT_S` is left out and counted (docs/operations.md, "Workers").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from starlette.requests import Request
from starlette.responses import Response

from gateway.lifecycle.workers import WorkerSlot

log = logging.getLogger("switchyard.workers")

SIBLING_TIMEOUT_S = 2.0


def merged_exposition(texts: dict[int, str]) -> bytes:
    """Prometheus text from each worker's own, one family per name, every sample labelled with its worker."""
    families: dict[str, Metric] = {}
    for index, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type)
            for s in family.samples:
                merged.add_sample(s.name, {**s.labels, "worker": str(index)}, s.value, s.timestamp)

    class Families:
        def collect(self):
            return list(families.values())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())
    return generate_latest(registry)


class WorkerMetrics:
    """This worker's exposition on its Unix socket, and the merged /metrics."""

    def __init__(self, slot: WorkerSlot, own: Callable[[], bytes], registry: CollectorRegistry) -> None:
        self.slot = slot
        self.own = own
        self._server: asyncio.AbstractServer | None = None
        self.failures = Counter(
            "switchyard_worker_scrape_failures",
            "Siblings that did not answer a scrape in time (their series were left out of it).",
            registry=registry,
        )

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._answer, path=self.slot.metrics_socket(self.slot.index))

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(self.own())
            await writer.drain()
        finally:
            writer.close()

    async def _sibling(self, index: int) -> str | None:
        try:
            async with asyncio.timeout(SIBLING_TIMEOUT_S):
                reader, writer = await asyncio.open_unix_connection(self.slot.metrics_socket(index))
                try:
                    return (await reader.read()).decode()
                finally:
                    writer.close()
        except (OSError, TimeoutError) as exc:
            log.warning("worker %d did not answer for /metrics: %r", index, exc)
            self.failures.inc()
            return None

    async def endpoint(self, request: Request) -> Response:
        others = [i for i in range(self.slot.count) if i != self.slot.index]
        answers = await asyncio.gather(*(self._sibling(i) for i in others))
        texts = {self.slot.index: self.own().decode()}
        texts.update({i: text for i, text in zip(others, answers) if text is not None})
        return Response(merged_exposition(texts), media_type=CONTENT_TYPE_LATEST)
