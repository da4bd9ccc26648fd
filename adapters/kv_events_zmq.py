"""A subscriber to a runtime's KV-event publisher (vLLM's or SGLang's ZMQ PUB socket):
frames topic, 8-byte big-endian sequence number, msgpack batch (adapters/kv_events.py).
The optional replay socket (a ROUTER) answers a start number with every batch it still
buffers, each `(topic, seq, payload)` (older vLLM: `(seq, payload)`), then sequence -1.
Lost batches are asked of it first, else the consumer (policies/kv_index.py) sees the
gap; a reconnect is a new start (`reconnected`). docs/architecture.md, "Routing", has the
rules. Needs `pyzmq` and `msgpack` (the `kv-events` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Protocol

from adapters.kv_events import KVEventBatch, KVEventDecodeError, decode_payload

log = logging.getLogger("switchyard.kv_events")

END_SEQ = -1


class EventConsumer(Protocol):
    def missing(self, seq: int) -> range: ...

    def receive(self, seq: int, batch: KVEventBatch) -> object: ...

    def reconnected(self) -> None: ...


@dataclass
class SubscriberStats:
    batches: int = 0
    undecodable: int = 0
    replays: int = 0
    replayed_batches: int = 0
    replay_failures: int = 0
    reconnects: int = 0


class KVEventSubscriber:
    def __init__(
        self,
        name: str,
        endpoint: str,
        consumer: EventConsumer,
        *,
        replay_endpoint: str | None = None,
        topic: str = "",
        replay_timeout_s: float = 1.0,
    ) -> None:
        import zmq.asyncio

        self.name = name
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.topic = topic.encode()
        self.consumer = consumer
        self.replay_timeout_s = replay_timeout_s
        self.stats = SubscriberStats()
        self._ctx = zmq.asyncio.Context.instance()
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()  # one batch, replay or restart handed to the consumer at a time

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"kv-events-{self.name}")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        import zmq

        sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, self.topic)
        monitor = sub.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sub.connect(self.endpoint)
        watcher = asyncio.create_task(self._watch(monitor), name=f"kv-events-{self.name}-connection")
        try:
            while True:
                frames = await sub.recv_multipart()
                if len(frames) != 3:
                    self.stats.undecodable += 1
                    continue
                async with self._lock:
                    await self._handle(int.from_bytes(frames[1], "big"), frames[2])
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            sub.disable_monitor()
            monitor.close(linger=0)
            sub.close(linger=0)

    async def _watch(self, monitor) -> None:
        """A connection made again after one was lost: a new start (module docstring)."""
        import zmq
        from zmq.utils.monitor import parse_monitor_message

        lost = False
        while True:
            event = parse_monitor_message(await monitor.recv_multipart())["event"]
            if event == zmq.EVENT_DISCONNECTED:
                lost = True
            elif event == zmq.EVENT_CONNECTED and lost:
                lost = False
                async with self._lock:
                    self.stats.reconnects += 1
                    log.warning("kv events from %s: publisher reconnected; its index starts over", self.name)
                    self.consumer.reconnected()
                    if self.replay_endpoint is not None:
                        await self._replay(range(0, 1 << 62))  # everything it still buffers

    async def _handle(self, seq: int, payload: bytes) -> None:
        try:
            batch = decode_payload(payload)
        except KVEventDecodeError as exc:
            self.stats.undecodable += 1
            log.warning("kv events from %s: batch %d skipped: %s", self.name, seq, exc)
            return
        lost = self.consumer.missing(seq)
        if lost and self.replay_endpoint is not None:
            await self._replay(lost)
        self.stats.batches += 1
        self.consumer.receive(seq, batch)

    async def _replay(self, lost: range) -> None:
        """Hand the consumer the lost batches the runtime still buffers, in order."""
        import zmq

        assert self.replay_endpoint is not None
        self.stats.replays += 1
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.connect(self.replay_endpoint)
        try:
            await dealer.send_multipart([b"", lost.start.to_bytes(8, "big")])
            while True:
                # not asyncio.wait_for: on Python 3.11 it drops a cancel that lands as the answer
                # arrives, and a closing subscriber would wait forever on its connection watcher
                async with asyncio.timeout(self.replay_timeout_s):
                    frames = await dealer.recv_multipart()
                seq_frame, payload = frames[-2], frames[-1]  # after the empty delimiter (and the topic)
                seq = int.from_bytes(seq_frame, "big", signed=True)
                if seq == END_SEQ:
                    return
                if seq in lost:  # a replay older than the buffer starts late: the consumer sees that gap
                    self.consumer.receive(seq, decode_payload(payload))
                    self.stats.replayed_batches += 1
        except (TimeoutError, KVEventDecodeError, IndexError) as exc:
            self.stats.replay_failures += 1
            log.warning("kv events from %s: replay of %d..%d failed: %r", self.name, lost.start, lost.stop - 1, exc)
        finally:
            dealer.close(linger=0)
