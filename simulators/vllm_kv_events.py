"""vLLM's KV-cache event publisher, for the vLLM double (`--kv-events-config JSON`).

From vLLM's source (`vllm/config/kv_events.py`, `vllm/distributed/kv_events.py`):

* `KVEventsConfig` keys: `enable_kv_cache_events` (False), `publisher` ("zmq" when
  events are enabled and it is not given, else "null"; "null" publishes nothing),
  `endpoint` ("tcp://*:5557"), `replay_endpoint` (None), `buffer_steps` (10000),
  `hwm` (100000), `max_queue_size` (100000), `topic` (""). Other keys are refused.
* `ZmqEventPublisher`: a PUB socket sends each batch as three frames: the topic,
  the sequence number as 8 bytes big-endian (0, 1, 2, ... from process start) and
  the msgpack payload. The payload is `KVEventBatch` encoded as an array,
  `[ts, events, data_parallel_rank]` (rank 0 here), each event a map whose first
  key `type` names it (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`), fields
  left at their defaults omitted (simulators/vllm_kv_cache.py writes the events).
  The last `buffer_steps` batches are kept; a ROUTER socket on `replay_endpoint`
  answers a request `[identity, "", start_seq (8 bytes)]` with every kept batch
  numbered `start_seq` or later as `[identity, "", topic, seq, payload]`, then
  `[identity, "", "", -1 (8 bytes, signed), ""]`.
* vLLM publishes one batch per engine step that produced events; the double's
  step is the end of one prompt's prefill (or a prefix-cache reset).

One deliberate difference: vLLM binds the PUB socket only when the endpoint has a
wildcard (`*`, `::`) or is ipc/inproc, and otherwise connects it to a listening
subscriber. The double always binds, so `tcp://127.0.0.1:PORT` is reachable by a
subscriber that connects (as the gateway's does); with real vLLM, give `tcp://*:PORT`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from dataclasses import dataclass, fields
from typing import Any

END_SEQ = (-1).to_bytes(8, "big", signed=True)


@dataclass
class KVEventsConfig:
    enable_kv_cache_events: bool = False
    publisher: str | None = None
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""

    def __post_init__(self) -> None:
        if self.publisher is None:
            self.publisher = "zmq" if self.enable_kv_cache_events else "null"
        if self.publisher not in ("zmq", "null"):
            raise ValueError(f"Unknown event publisher '{self.publisher}'")

    @classmethod
    def parse(cls, text: str) -> KVEventsConfig:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--kv-events-config is not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ValueError("--kv-events-config must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"--kv-events-config: unknown keys {unknown}")
        return cls(**raw)

    @property
    def publishes(self) -> bool:
        return self.enable_kv_cache_events and self.publisher == "zmq"


class ZmqEventPublisher:
    """PUB socket plus replay buffer and ROUTER; `publish` never blocks (a PUB socket
    drops at its high-water mark rather than wait)."""

    def __init__(self, config: KVEventsConfig, data_parallel_rank: int = 0) -> None:
        import msgpack
        import zmq
        import zmq.asyncio

        self._zmq = zmq
        self._pack = msgpack.Packer(use_bin_type=True)
        self.config = config
        self.rank = data_parallel_rank
        self.topic = config.topic.encode("utf-8")
        self.seq = 0
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=max(1, config.buffer_steps))
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.bind(config.endpoint)
        self._actx = zmq.asyncio.Context()
        self._replay = None
        self._task: asyncio.Task[None] | None = None
        if config.replay_endpoint:
            self._replay = self._actx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(config.replay_endpoint)
            self._task = asyncio.get_running_loop().create_task(self._serve_replay())

    def publish(self, events: list[dict[str, Any]]) -> None:
        payload = self._pack.pack([time.time(), events, self.rank])
        seq = self.seq
        self.seq += 1
        with contextlib.suppress(self._zmq.Again):
            self._pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload), flags=self._zmq.NOBLOCK)
        self.buffer.append((seq, payload))

    async def _serve_replay(self) -> None:
        assert self._replay is not None
        while True:
            frames = await self._replay.recv_multipart()
            if len(frames) != 3:
                continue  # vLLM logs "Invalid replay request" and goes on
            identity, _, start = frames
            start_seq = int.from_bytes(start, "big")
            for seq, payload in list(self.buffer):
                if seq >= start_seq:
                    await self._replay.send_multipart((identity, b"", self.topic, seq.to_bytes(8, "big"), payload))
            await self._replay.send_multipart((identity, b"", b"", END_SEQ, b""))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
        self._ctx.term()
        self._actx.term()
